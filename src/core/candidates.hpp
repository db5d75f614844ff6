// One backend's verdict on one shape, stage by stage (DESIGN §4): available,
// check, then the kernel catalog's can_implement, which has the final word.
// The selector builds its capable set from these; `explain` and `sweep` use
// them to show every reason when nothing is capable.
#pragma once

#include <vector>

#include "helixmla/selector.hpp"

namespace helixmla {

Candidate assess(const Backend& backend, const PhaseShape& shape, const Environment& env);
std::vector<Candidate> assess_all(const std::vector<BackendPtr>& backends, const PhaseShape& shape,
                                  const Environment& env);

}  // namespace helixmla

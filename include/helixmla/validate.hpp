// One validator for every rule of the batch model. It stops at the first
// violated rule and names the field, the index and the value.
#pragma once

#include "helixmla/problem.hpp"

namespace helixmla {

inline constexpr std::int32_t kMaxHeads = 128;

// Throws InvalidArgument on the first violated rule.
void validate(const Problem& problem);

}  // namespace helixmla

// Selection verdicts as JSON, shared by `explain` and `sweep`.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "helixmla/selector.hpp"

namespace helixmla::tools {

nlohmann::json candidate_json(const Candidate& candidate);
nlohmann::json candidates_json(const std::vector<Candidate>& candidates);

}  // namespace helixmla::tools

#include "decision_json.hpp"

#include "helixmla/profile.hpp"

namespace helixmla::tools {

nlohmann::json candidate_json(const Candidate& c) {
  nlohmann::json out = {{"backend", c.backend},
                        {"available", c.available},
                        {"capable", c.capable},
                        {"reason", c.reason},
                        {"kernel", c.kernel},
                        {"fails_at_run", fails_at_run(c)}};
  out["measured_us"] = c.measured_us ? nlohmann::json(*c.measured_us) : nlohmann::json(nullptr);
  return out;
}

nlohmann::json candidates_json(const std::vector<Candidate>& candidates) {
  nlohmann::json out = nlohmann::json::array();
  for (const Candidate& c : candidates) out.push_back(candidate_json(c));
  return out;
}

}  // namespace helixmla::tools

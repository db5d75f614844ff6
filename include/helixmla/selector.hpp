// Capability-driven backend selection (DESIGN §4). Performance chooses only
// among capable backends, so no performance rule can route a shape to a
// backend that cannot run it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "helixmla/backend.hpp"
#include "helixmla/perf_table.hpp"

namespace helixmla {

struct Candidate {
  std::string backend;
  bool available = false;
  bool capable = false;      // available, check passed and can_implement passed
  std::string reason;        // first failed stage with its reason, or the kernel chosen
  std::string kernel;        // variant can_implement named, when capable
  std::optional<double> measured_us;  // from the performance table
};

struct Decision {
  PhaseShape shape;
  std::string choice;                   // empty only inside a thrown error
  BackendPtr backend;
  std::vector<Candidate> candidates;    // every backend, in priority order
  // "forced"; "measured: <entry>" when the table's entry times every capable
  // backend; "priority", or "priority: <entry> has no time for capable <names>"
  // when it times only some of them.
  std::string rule;
  std::string trace() const;            // multi-line human-readable explanation
};

class Selector {
 public:
  Selector(std::vector<BackendPtr> backends, Environment env, PerfTable table = {});

  // Cached by the full shape (plus the forced name). Throws NoCapableBackend
  // listing every backend's reason when the capable set is empty, or when a
  // forced backend cannot run the shape.
  const Decision& select(const PhaseShape& shape, const std::string& forced = {}) const;
  Decision select_uncached(const PhaseShape& shape, const std::string& forced = {}) const;

  const Environment& environment() const { return env_; }
  const std::vector<BackendPtr>& backends() const { return backends_; }

 private:
  struct Cache;
  std::vector<BackendPtr> backends_;
  Environment env_;
  PerfTable table_;
  std::shared_ptr<Cache> cache_;
};

}  // namespace helixmla

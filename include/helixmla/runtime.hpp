// The library's front door: validate a batch, split it into phases, select a
// backend per phase, prepare and enqueue.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "helixmla/backend.hpp"
#include "helixmla/selector.hpp"

namespace helixmla {

struct RuntimeOptions {
  std::string forced_backend;           // empty: let the selector choose
  std::optional<Environment> environment;  // empty: Environment::detect()
  std::string perf_table_path;          // empty: $HELIXMLA_PERF_TABLE, else none
  std::vector<BackendPtr> backends;     // empty: builtin_backends()
};

struct Selection {
  std::optional<Decision> context;
  std::optional<Decision> generation;
};

// Every backend compiled into this library.
std::vector<BackendPtr> builtin_backends();

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});

  // Validates the batch and chooses a backend for each of its phases.
  Selection select(const Problem& problem) const;
  std::size_t workspace_bytes(const Problem& problem) const;
  // Host work only, plus uploads enqueued on `stream`; the returned run's
  // enqueue is graph-capturable.
  std::unique_ptr<PreparedRun> prepare(const Problem& problem, Workspace workspace,
                                       void* stream) const;

  const Selector& selector() const { return selector_; }
  const RuntimeOptions& options() const { return options_; }

 private:
  Selection select_phases(const PhasePlan& plan, const Problem& problem) const;

  RuntimeOptions options_;
  Selector selector_;
};

}  // namespace helixmla

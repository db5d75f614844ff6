// The library's front door: validate a batch, split it into phases, select a
// backend per phase, prepare and enqueue.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "helixmla/backend.hpp"
#include "helixmla/selector.hpp"

namespace helixmla {

struct RuntimeOptions {
  std::string forced_backend;           // empty: let the selector choose
  std::optional<Environment> environment;  // empty: Environment::detect()
  std::string perf_table_path;          // empty: as load_perf_table says
  std::vector<BackendPtr> backends;     // empty: builtin_backends()
};

struct Selection {
  std::optional<Decision> context;
  std::optional<Decision> generation;
};

// The chosen backends for a person to read: the one backend of a batch of
// one phase, else "context: A, generation: B".
std::string describe_choices(const Selection& selection);

// Every backend compiled into this library.
std::vector<BackendPtr> builtin_backends();

// The performance table a Runtime with `options` uses on `env`: the options'
// path, else $HELIXMLA_PERF_TABLE, else the table shipped for env's
// architecture (the source tree's data/perf, then the install tree's), else
// none. A table that cannot be read or parsed throws InvalidArgument naming
// where its path came from.
PerfTable load_perf_table(const RuntimeOptions& options, const Environment& env);

// A batch validated, split into phases and a backend chosen for each: what
// workspace_bytes, prepare and refresh all need, done once
// (Runtime::plan_step). It refers to the caller's metadata (lengths, page
// table, bounds), which must stay alive and unchanged until its last use.
// One thread at a time: it sizes its phases on first use.
class StepPlan {
 public:
  const Selection& selection() const { return selection_; }
  // Each phase's size, asked of its backend once per StepPlan (the first
  // call here or in prepare); a refresh does not ask.
  std::size_t workspace_bytes() const;
  // Host work only, plus uploads enqueued on `stream`; the returned run's
  // enqueue is graph-capturable.
  std::unique_ptr<PreparedRun> prepare(Workspace workspace, void* stream) const;
  // Makes `run` (prepared by a Runtime for an earlier step) run this step
  // instead, when this step launches exactly as the run's does (same
  // phases, backends, kernels, grid sizes, workspace layout): its metadata
  // is rewritten in place, uploaded on `stream`, so CUDA graphs captured
  // from its enqueues replay this step. Returns false, changing nothing,
  // when it does not; then prepare a new run (and capture again). Call it
  // outside any capture, and only once earlier replays no longer need the
  // old metadata (after them on `stream`).
  bool refresh(PreparedRun& run, void* stream) const;

 private:
  friend class Runtime;
  // Each phase of the step and the backend chosen for it, in phase order.
  std::vector<std::pair<const Phase*, const Backend*>> phase_calls() const;
  // Each phase's workspace in phase order, rounded up to the workspace
  // alignment; sized on first use.
  const std::vector<std::size_t>& phase_bytes() const;

  Problem problem_;
  PhasePlan phases_;
  Selection selection_;
  mutable std::vector<std::size_t> phase_bytes_;  // empty until sized
};

// Safe to share between threads: several may validate, select, size and
// prepare at once, each with its own batches and streams
// (tests/gpu/test_concurrent_runs_gpu.cpp). A StepPlan and a PreparedRun
// belong to one thread at a time.
class Runtime {
 public:
  // Throws InvalidArgument for a bad HELIXMLA_DEVICE (Environment::detect)
  // or a performance table that cannot be loaded (load_perf_table).
  explicit Runtime(RuntimeOptions options = {});

  // Validates the batch and chooses a backend for each of its phases.
  Selection select(const Problem& problem) const;
  // Validation and selection once, for an engine that asks the workspace
  // size and prepares, or refreshes a captured run, every step.
  StepPlan plan_step(const Problem& problem) const;
  // plan_step(problem).workspace_bytes() and .prepare(...).
  std::size_t workspace_bytes(const Problem& problem) const;
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

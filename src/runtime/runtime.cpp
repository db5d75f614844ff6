#include "helixmla/runtime.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/shipped_data.hpp"
#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/validate.hpp"

namespace helixmla {

namespace {

constexpr std::size_t kWorkspaceAlignment = 256;

std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// The phases' runs in order; a layer's tensors reach each phase at the
// offsets plan_phases gave its part.
class CompositeRun final : public PreparedRun {
 public:
  explicit CompositeRun(const Problem& whole) {
    shape_.dims = whole.dims;
    shape_.num_heads = whole.num_heads;
    shape_.q_dtype = whole.q_dtype;
    shape_.out_dtype = whole.out_dtype;
    shape_.stats = whole.stats;
  }
  void add(std::unique_ptr<PreparedRun> run, const Backend* backend, const Phase& phase) {
    phases_.push_back({std::move(run), backend, phase.kind, phase.first_token});
  }
  void enqueue(void* stream) override {
    for (auto& phase : phases_) phase.run->enqueue(stream);
  }
  void enqueue(const LayerTensors& layer, void* stream) override {
    check_layer(layer);
    for (auto& phase : phases_) phase.run->enqueue(phase_layer(shape_, layer, phase.first_token), stream);
  }
  void check_layer(const LayerTensors& layer) const override {
    validate_layer(layer, shape_.stats.present());
    for (const auto& phase : phases_) phase.run->check_layer(phase_layer(shape_, layer, phase.first_token));
  }

  // The next step takes this run when it has the same phases on the same
  // backends at the same token offsets (a captured enqueue baked each
  // phase's tensor offsets in) and every phase's run can take its part;
  // all or nothing.
  bool refresh_to(const Problem& next, const std::vector<std::pair<const Phase*, const Backend*>>& parts,
                  void* stream) {
    if (parts.size() != phases_.size() || next.dims != shape_.dims || next.num_heads != shape_.num_heads ||
        next.q_dtype != shape_.q_dtype || next.out_dtype != shape_.out_dtype ||
        next.stats.present() != shape_.stats.present()) {
      return false;
    }
    std::vector<PreparedRun::Refresh> steps;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& [phase, backend] = parts[i];
      if (phases_[i].backend != backend || phases_[i].kind != phase->kind ||
          phases_[i].first_token != phase->first_token) {
        return false;
      }
      steps.push_back(phases_[i].run->plan_refresh(phase->problem));
      if (!steps.back()) return false;
    }
    for (const auto& step : steps) step(stream);
    return true;
  }

 private:
  struct PhaseRun {
    std::unique_ptr<PreparedRun> run;
    const Backend* backend;
    PhaseKind kind;
    std::int64_t first_token;
  };
  Problem shape_;  // what the offsets depend on, and whether stats are written; no spans
  std::vector<PhaseRun> phases_;
};

}  // namespace

PerfTable load_perf_table(const RuntimeOptions& options, const Environment& env) {
  std::string path = options.perf_table_path;
  std::string field = "perf_table_path";
  if (path.empty()) {
    if (const char* from_env = std::getenv("HELIXMLA_PERF_TABLE")) {
      path = from_env;
      field = "HELIXMLA_PERF_TABLE";
    }
  }
  if (path.empty() && env.has_gpu()) {
    const std::string file = "perf/" + std::string(to_string(env.arch)) + ".json";
    for (const std::string& root : shipped_data_roots()) {
      if (std::filesystem::exists(root + "/data/" + file)) {
        path = root + "/data/" + file;
        break;
      }
    }
  }
  return path.empty() ? PerfTable{} : PerfTable::load(path, field);
}

Runtime::Runtime(RuntimeOptions options)
    : options_(std::move(options)),
      selector_(options_.backends.empty() ? builtin_backends() : options_.backends,
                options_.environment ? *options_.environment : Environment::detect(),
                PerfTable{}) {
  PerfTable table = load_perf_table(options_, selector_.environment());
  if (!table.empty()) selector_ = Selector(selector_.backends(), selector_.environment(), std::move(table));
}

std::string describe_choices(const Selection& selection) {
  if (selection.context && selection.generation) {
    return "context: " + selection.context->choice + ", generation: " + selection.generation->choice;
  }
  if (selection.context) return selection.context->choice;
  return selection.generation ? selection.generation->choice : std::string();
}

Selection Runtime::select(const Problem& problem) const {
  validate(problem);
  return select_phases(plan_phases(problem), problem);
}

Selection Runtime::select_phases(const PhasePlan& plan, const Problem& problem) const {
  Selection selection;
  if (plan.context) selection.context = selector_.select(shape_of(*plan.context, problem), options_.forced_backend);
  if (plan.generation) {
    selection.generation = selector_.select(shape_of(*plan.generation, problem), options_.forced_backend);
  }
  return selection;
}

StepPlan Runtime::plan_step(const Problem& problem) const {
  validate(problem);
  StepPlan step;
  step.problem_ = problem;
  step.phases_ = plan_phases(problem);
  step.selection_ = select_phases(step.phases_, problem);
  return step;
}

std::vector<std::pair<const Phase*, const Backend*>> StepPlan::phase_calls() const {
  std::vector<std::pair<const Phase*, const Backend*>> calls;
  for (const auto& [phase, decision] :
       {std::pair{&phases_.context, &selection_.context}, std::pair{&phases_.generation, &selection_.generation}}) {
    if (*phase) calls.emplace_back(&**phase, (*decision)->backend.get());
  }
  return calls;
}

const std::vector<std::size_t>& StepPlan::phase_bytes() const {
  if (phase_bytes_.empty()) {
    for (const auto& [phase, backend] : phase_calls()) {
      phase_bytes_.push_back(align_up(backend->workspace_bytes(phase->problem)));
    }
  }
  return phase_bytes_;
}

std::size_t StepPlan::workspace_bytes() const {
  std::size_t bytes = 0;
  for (const std::size_t phase : phase_bytes()) bytes += phase;
  return bytes;
}

std::size_t Runtime::workspace_bytes(const Problem& problem) const { return plan_step(problem).workspace_bytes(); }

std::unique_ptr<PreparedRun> Runtime::prepare(const Problem& problem, Workspace workspace,
                                              void* stream) const {
  return plan_step(problem).prepare(workspace, stream);
}

bool StepPlan::refresh(PreparedRun& run, void* stream) const {
  auto* composite = dynamic_cast<CompositeRun*>(&run);
  return composite != nullptr && composite->refresh_to(problem_, phase_calls(), stream);
}

std::unique_ptr<PreparedRun> StepPlan::prepare(Workspace workspace, void* stream) const {
  const auto calls = phase_calls();
  const std::vector<std::size_t>& bytes = phase_bytes();
  const std::size_t total = workspace_bytes();
  if (workspace.data && workspace.bytes < total) {
    throw InvalidArgument("workspace.bytes", -1, std::to_string(workspace.bytes),
                          "smaller than workspace_bytes() of this batch (" + std::to_string(total) + ")");
  }
  auto composite = std::make_unique<CompositeRun>(problem_);
  auto* cursor = static_cast<unsigned char*>(workspace.data);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& [phase, chosen] = calls[i];
    const Backend& backend = *chosen;
    if (!backend.executable()) {
      throw NoCapableBackend("backend " + std::string(backend.name()) +
                             " is described by a profile and cannot be executed");
    }
    Workspace part;
    if (cursor) {
      part = {cursor, bytes[i]};
      cursor += bytes[i];
    }
    composite->add(backend.prepare(phase->problem, part, stream), &backend, *phase);
  }
  return composite;
}

}  // namespace helixmla

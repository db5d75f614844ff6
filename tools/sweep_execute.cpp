#include "sweep_execute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "helixmla/environment.hpp"
#include "helixmla/error.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "compare.hpp"
#include "device_batch.hpp"
#include "gpu_measure.hpp"
#include "helixmla/validate.hpp"
#include "parallel_naive_attention.hpp"
#endif

namespace helixmla::tools {

namespace {

struct Cell {
  std::string key;
  // The key without phase mixing and Helix: (backend, kernel, page class,
  // dtypes, q_len class): each is run at least once before any second form.
  std::string core;
  std::string backend;
  std::string kernel;
  bool jit = false;
  bool mixed = false;
  std::int32_t generations = 1;  // requests of the generation part, as swept
  PhaseShape shape;
};

// Kernels may depend on the batch (the tensor-core backend picks its row
// tile and its build by batch bucket), so the combinations are collected at
// the space's generation count and again at this one; a combination found
// at both keeps the first.
constexpr std::int32_t kBigBatchGenerations = 128;

const char* page_class(std::int32_t page) {
  if (page == 1) return "page1";
  return (page & (page - 1)) == 0 ? "page-pow2" : "page-other";
}

std::string q_class(const PhaseShape& shape) {
  if (shape.phase == PhaseKind::context) return "context";
  return shape.q_len == 1 ? "q1" : (shape.q_len <= 4 ? "q2-4" : "q5-16");
}

#if defined(HELIXMLA_WITH_CUDA)
struct CellResult {
  double rel_l2 = 0.0;
  bool pass = false;
  std::string error;
};

// A JIT kernel compiles with NVRTC on its first prepare, seconds each (180
// of them on sm90 with an empty cache: most of a cold run's time), and
// different kernels compile at once. So the first cell of each runs on a
// few threads of its own while the caller runs the other cells in order.
class EarlyCells {
 public:
  using Run = std::function<CellResult(const Cell&, cudaStream_t)>;

  EarlyCells(std::vector<const Cell*> cells, unsigned threads, int device, Run run, std::function<bool()> in_budget)
      : cells_(std::move(cells)), answers_(cells_.size()) {
    for (std::size_t i = 0; i < cells_.size(); ++i) results_.emplace(cells_[i], answers_[i].get_future());
    try {
      for (unsigned t = 0; t < threads; ++t) {
        workers_.push_back(std::async(std::launch::async, [this, device, run, in_budget] { work(device, run, in_budget); }));
      }
    } catch (const std::system_error&) {
    }
    if (workers_.empty()) work(-1, run, in_budget);  // no thread: every cell left to the caller
  }
  // Stops handing out cells; the workers' futures then wait for them.
  ~EarlyCells() { next_ = cells_.size(); }

  // The pool's result for `cell`, waiting for it; none for a cell not the
  // pool's, or one it did not run (outside the budget, or no CUDA stream).
  std::optional<CellResult> result(const Cell* cell) {
    const auto found = results_.find(cell);
    return found == results_.end() ? std::nullopt : found->second.get();
  }

 private:
  void work(int device, const Run& run, const std::function<bool()>& in_budget) {
    cudaStream_t own = nullptr;
    const bool ready = device >= 0 && cudaSetDevice(device) == cudaSuccess &&
                       cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess;
    for (std::size_t i = next_++; i < cells_.size(); i = next_++) {
      answers_[i].set_value(ready && in_budget() ? std::optional<CellResult>(run(*cells_[i], own)) : std::nullopt);
    }
    if (own) cudaStreamDestroy(own);
  }

  std::vector<const Cell*> cells_;
  std::vector<std::promise<std::optional<CellResult>>> answers_;  // one per cell, set once it is taken
  std::map<const Cell*, std::future<std::optional<CellResult>>> results_;
  std::atomic<std::size_t> next_{0};
  std::vector<std::future<void>> workers_;  // last: destroyed (joined) first
};

// A batch with the cell's shape and a few pages of KV; Helix cells get stats
// and per-token bounds below the ordinary mask. The batch is built as the
// sweep described it (its generation and context counts); a batch whose phase
// shape differs from the swept one, or that the backend refuses, fails the
// cell instead of running a shape nobody checked.
CellResult execute_cell(const Backend& backend, const Cell& cell, const SweepSpace& space, const Environment& env,
                        cudaStream_t stream) {
  testing::BatchSpec spec;
  spec.heads = cell.shape.num_heads;
  spec.kv_dtype = cell.shape.kv_dtype;
  spec.q_dtype = cell.shape.q_dtype;
  spec.kv_scale = testing::default_kv_scale(spec.kv_dtype);
  spec.page_size = cell.shape.page_size;
  spec.generations = cell.shape.phase == PhaseKind::generation || cell.mixed ? cell.generations : 0;
  spec.q_len = cell.shape.phase == PhaseKind::generation ? cell.shape.q_len : 1;
  spec.kv_len = {std::min(3 * spec.page_size + 17, 900) + spec.q_len, 2 * spec.page_size + 5 + spec.q_len};
  spec.contexts = cell.mixed || cell.shape.phase == PhaseKind::context ? space.contexts : 0;
  spec.context_len = space.context_len;
  spec.stats = cell.shape.helix || cell.shape.has_stats;
  spec.seed = std::hash<std::string>{}(cell.key);
  testing::SyntheticBatch host(spec);
  std::vector<std::int32_t> bounds;
  testing::DeviceBatch device(host, env.device);
  Problem problem = device.problem();
  if (cell.shape.helix) {
    for (std::int32_t r = 0; r < problem.num_requests(); ++r) {
      for (std::int32_t t = 0; t < problem.q_len[r]; ++t) {
        bounds.push_back(static_cast<std::int32_t>(
            std::max<std::int64_t>(0, visible_kv(problem.kv_len[r], problem.q_len[r], t) - t % 3)));
      }
    }
    problem.helix.cp_size = cell.shape.cp_size;
    problem.helix.token_kv_bounds = bounds;
  }
  validate(problem);
  const PhasePlan plan = plan_phases(problem);
  const std::optional<Phase>& planned = cell.shape.phase == PhaseKind::context ? plan.context : plan.generation;
  CellResult result;
  if (!planned) {
    result.error = "the executed batch has no phase of the swept kind";
    return result;
  }
  const Phase& phase = *planned;
  const PhaseShape actual = shape_of(phase, problem);
  PhaseShape swept = cell.shape;
  swept.on_device = true;  // executed cells always hold their tensors on the device
  if (actual != swept) {
    result.error = fmt::format("the executed batch's shape ({}) is not the swept cell's ({})", describe(actual),
                               describe(swept));
    return result;
  }
  if (const Verdict check = backend.check(actual); !check) {
    result.error = "check refuses the executed shape: " + check.reason;
    return result;
  }
  if (const Verdict kernel = backend.catalog().can_implement(actual, env, nullptr); !kernel) {
    result.error = "no kernel for the executed shape: " + kernel.reason;
    return result;
  }
  auto run = backend.prepare(phase.problem, {}, stream);
  run->enqueue(stream);
  cuda_ok(cudaStreamSynchronize(stream), "sweep cell");
  device.download_outputs();

  Problem reference_problem = host.problem();
  reference_problem.helix = problem.helix;
  const testing::NaiveResult expected = testing::parallel_naive_attention(reference_problem);
  const std::int64_t row = phase.first_token * spec.heads;
  const std::int64_t rows = phase.problem.num_tokens() * spec.heads;
  const std::int64_t rank = spec.dims.kv_lora_rank;
  const std::vector<double> want(expected.out.begin() + row * rank, expected.out.begin() + (row + rows) * rank);
  const auto* got = host.out_.data() + row * rank * static_cast<std::int64_t>(dtype_size(spec.q_dtype));
  const testing::Comparison c = testing::compare(got, spec.q_dtype, want);
  result.rel_l2 = c.rel_l2_err;
  result.pass = c.within(testing::output_tolerance(spec.kv_dtype));
  if (spec.stats) {
    const std::vector<float> got_stats(host.stats_.begin() + row * 2, host.stats_.begin() + (row + rows) * 2);
    const std::vector<double> want_stats(expected.stats.begin() + row * 2, expected.stats.begin() + (row + rows) * 2);
    result.pass =
        result.pass && testing::compare_stats(got_stats, want_stats).within(testing::stats_tolerance(spec.kv_dtype));
  }
  return result;
}
#endif

}  // namespace

int execute_sweep(const std::vector<BackendPtr>& backends, SweepSpace space, double max_seconds, bool json) {
#if defined(HELIXMLA_WITH_CUDA)
  const Environment env = Environment::detect();
  require_cuda_gpu(env, "sweep --execute");
  space.archs = {env.arch};
  space.device_tensors = true;

  std::map<std::string, Cell> cells;
  std::int32_t generations = space.generations;  // of the pass below
  SweepHooks hooks;
  hooks.visit = [&](const SweepPoint& point) {
    if (!point.decision) return;
    for (const Candidate& c : point.decision->candidates) {
      if (!c.capable || c.backend == "cpu") continue;
      const std::string core = fmt::format("{} {} {} kv={} q={} {}", c.backend, c.kernel,
                                           page_class(point.shape.page_size), to_string(point.shape.kv_dtype),
                                           to_string(point.shape.q_dtype), q_class(point.shape));
      const std::string key =
          fmt::format("{} {}{}", core, point.shape.helix ? "helix" : "plain", point.mixed ? " mixed" : "");
      if (cells.count(key)) continue;
      const bool jit = c.reason.find("(JIT)") != std::string::npos;
      cells.emplace(key, Cell{key, core, c.backend, c.kernel, jit, point.mixed, generations, point.shape});
    }
  };
  std::cerr << "sweep --execute: collecting the combinations the CUDA backends claim on " << to_string(env.arch) << "\n";
  std::vector<std::int32_t> passes{space.generations};
  if (space.generations < kBigBatchGenerations) passes.push_back(kBigBatchGenerations);
  for (const std::int32_t pass : passes) {
    generations = pass;
    SweepSpace at = space;
    at.generations = pass;
    sweep(backends, at, hooks);
  }

  // A budget that runs out should still have run every core combination
  // once: one cell of each first, then the Helix and mixed forms; within
  // each, precompiled kernels before those NVRTC compiles.
  std::map<std::string, const Cell*> first_of_core;  // the plain, unmixed form where there is one
  auto plain = [](const Cell* c) { return !c->shape.helix && !c->mixed; };
  for (const auto& [key, cell] : cells) {
    auto [at, added] = first_of_core.emplace(cell.core, &cell);
    if (!added && !plain(at->second) && plain(&cell)) at->second = &cell;
  }
  auto tier = [&](const Cell* c) { return first_of_core.at(c->core) == c ? 0 : 1; };
  std::vector<const Cell*> order;
  for (const auto& [key, cell] : cells) order.push_back(&cell);
  std::stable_sort(order.begin(), order.end(), [&](const Cell* a, const Cell* b) {
    return std::pair(tier(a), a->jit) < std::pair(tier(b), b->jit);
  });
  const std::size_t core_count = first_of_core.size();

  std::map<std::string, BackendPtr> by_name;
  for (const BackendPtr& b : backends) by_name[std::string(b->name())] = b;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const auto run_cell = [&](const Cell& cell, cudaStream_t on) {
    CellResult r;
    try {
      r = execute_cell(*by_name.at(cell.backend), cell, space, env, on);
    } catch (const std::exception& e) {
      r.error = e.what();
    } catch (...) {
      r.error = "an exception of unknown type";
    }
    return r;
  };

  cuda_ok(cudaSetDevice(env.device), "cudaSetDevice");
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<const Cell*> firsts;  // of each JIT kernel, in order
  {
    std::set<std::string> kernels;
    for (const Cell* cell : order) {
      if (cell->jit && kernels.insert(cell->kernel).second) firsts.push_back(cell);
    }
  }
  const auto workers = static_cast<unsigned>(
      std::min<std::size_t>(firsts.size(), std::clamp(std::thread::hardware_concurrency(), 2u, 16u) - 1));
  std::cerr << fmt::format("sweep --execute: {} JIT kernels compile on {} threads meanwhile\n", firsts.size(), workers);
  EarlyCells early_cells(firsts, workers, env.device, run_cell, [&] { return elapsed() <= max_seconds; });

  nlohmann::json rows = nlohmann::json::array();
  std::size_t executed = 0, failed = 0, core_executed = 0, core_failed = 0;
  for (const Cell* cell : order) {
    const std::optional<CellResult> early = early_cells.result(cell);
    if (!early && elapsed() > max_seconds) continue;
    CellResult r = early ? *early : run_cell(*cell, stream);
    if (early && !r.error.empty()) {
      r.error += " (run beside other cells on the compile pool: a device fault may be another cell's)";
    }
    ++executed;
    failed += r.pass ? 0 : 1;
    if (tier(cell) == 0) {
      ++core_executed;
      core_failed += r.pass ? 0 : 1;
    }
    if (!json) {
      std::cout << fmt::format("{:<4} {:>9.2e}  {} ({} generations){}\n", r.pass ? "ok" : "FAIL", r.rel_l2,
                               cell->key, cell->generations, r.error.empty() ? "" : "  error: " + r.error);
    }
    rows.push_back({{"cell", cell->key}, {"generations", cell->generations}, {"shape", describe(cell->shape)},
                    {"pass", r.pass}, {"rel_l2", r.rel_l2}, {"error", r.error}});
    if (executed % 25 == 0) std::cerr << fmt::format("sweep --execute: {}/{} combinations\n", executed, order.size());
  }
  cudaStreamDestroy(stream);
  const std::size_t skipped = order.size() - executed;
  if (json) {
    std::cout << nlohmann::json{{"arch", std::string(to_string(env.arch))}, {"combinations", order.size()},
                                {"executed", executed}, {"failed", failed}, {"not_executed", skipped},
                                {"core_combinations", core_count}, {"core_executed", core_executed},
                                {"core_failed", core_failed}, {"cells", rows}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << fmt::format("\nsweep --execute on {}: {} combinations, {} executed, {} failed, {} not executed (time budget {} s); "
                             "core (backend, kernel, page class, dtypes, q_len class): {} of {} executed, {} failed\n",
                             to_string(env.arch), order.size(), executed, failed, skipped, max_seconds, core_executed,
                             core_count, core_failed);
  }
  return failed == 0 && skipped == 0 ? 0 : 1;
#else
  (void)backends;
  (void)space;
  (void)max_seconds;
  (void)json;
  throw RuntimeFailure("sweep --execute needs a build with the CUDA backends");
#endif
}

}  // namespace helixmla::tools

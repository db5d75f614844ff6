// `helixmla run`: build a synthetic batch, run it through the runtime on the
// chosen backend, and check it against an independent float64 computation.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "comma_list.hpp"
#include "commands.hpp"
#include "compare.hpp"
#include "helix_run.hpp"
#include "helixmla/environment.hpp"
#include "helixmla/runtime.hpp"
#include "integer_flag.hpp"
#include "parallel_naive_attention.hpp"
#include "problem_flags.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "device_batch.hpp"
#include "gpu_measure.hpp"
#endif

namespace helixmla::tools {

namespace {

struct RunFlags {
  ProblemFlags problem;
  int layers = 1;
  int cp = 1;
  std::vector<int> devices;
  int repeat = 3;
  bool json = false;
  HelixRunOptions helix;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median wall time of `repeat` synchronous host runs.
double time_host(PreparedRun& run, int repeat) {
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run.enqueue(nullptr);
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return median(times);
}

// One layer's outputs against the naive float64 attention of its batch.
struct LayerCheck {
  testing::Comparison error;
  testing::StatsComparison stats_error;
  bool stats_ok = true;
  bool pass = false;
};

LayerCheck check_layer(testing::SyntheticBatch& batch) {
  // The plain float64 code cut over the cores (a unit test holds it equal
  // to the one-thread form bit for bit): the check, not the run, took most
  // of a large CPU run's time.
  const testing::NaiveResult expected = testing::parallel_naive_attention(batch.problem());
  LayerCheck c;
  c.error = testing::compare(batch.out_.data(), batch.spec().q_dtype, expected.out);
  if (batch.spec().stats) c.stats_error = testing::compare_stats(batch.stats_, expected.stats);
  c.stats_ok = c.stats_error.within(testing::stats_tolerance(batch.spec().kv_dtype));
  c.pass = c.error.within(testing::output_tolerance(batch.spec().kv_dtype)) && c.stats_ok;
  return c;
}

// Phase lines on stderr for a batch whose set-up and check take seconds on
// the CPU (a million KV positions of 48 heads took two minutes before the
// table appeared): what is being done, so a long run does not look hung.
class Progress {
 public:
  Progress(const testing::BatchSpec& spec, int layers)
      : positions_(testing::host_footprint(spec).kv_positions),
        loud_(positions_ * spec.heads * layers >= kLoudHeadPositions) {}
  void phase(const std::string& what) const {
    if (!loud_) return;
    std::cerr << fmt::format("run: {} [{:.1f} s]\n", what, seconds()) << std::flush;
  }
  std::int64_t positions() const { return positions_; }

 private:
  static constexpr std::int64_t kLoudHeadPositions = std::int64_t{1} << 24;
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::int64_t positions_;
  bool loud_;
};

int run_single(const RunFlags& flags) {
  const testing::BatchSpec spec = to_batch_spec(flags.problem);
  // to_batch_spec counted one layer; all of them are built before the run.
  if (const std::string complaint = host_footprint_complaint(spec, flags.layers); !complaint.empty()) {
    throw CLI::ValidationError("--layers", complaint);
  }
  const Progress progress(spec, flags.layers);
  progress.phase(fmt::format("building the batch ({} layer(s), {} KV positions of {} heads)", flags.layers,
                             progress.positions(), spec.heads));
  testing::SyntheticBatch batch(spec);
  // --layers: the step's other layers, run through the first layer's
  // prepared run (the engine's flow: prepare once a step, enqueue a layer).
  std::vector<testing::SyntheticBatch> more_layers;
  more_layers.reserve(static_cast<std::size_t>(flags.layers - 1));
  for (int l = 1; l < flags.layers; ++l) more_layers.push_back(testing::another_layer(batch, l));
  RuntimeOptions options;
  options.forced_backend = flags.problem.backend;
  Runtime runtime(options);
  const Environment& env = runtime.selector().environment();
  const bool on_device = env.has_gpu() && flags.problem.backend != "cpu";

  // On the GPU: queued (device time per call) and isolated (plus the
  // host's launch latency) medians, as `bench` reports them. On the CPU the
  // two are the same wall-clock median.
  double time_us = 0.0;
  double isolated_us = 0.0;
  std::string backend;
#if defined(HELIXMLA_WITH_CUDA)
  if (on_device) {
    testing::DeviceBatch device_batch(batch, env.device);
    const Problem problem = device_batch.problem();
    const StepPlan step = runtime.plan_step(problem);
    backend = describe_choices(step.selection());
    cudaStream_t stream;
    cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    testing::DeviceBuffer workspace(step.workspace_bytes());
    auto run = step.prepare({workspace.data(), workspace.bytes()}, stream);
    const Timing timing = time_runs({run.get()}, stream, 1, flags.repeat, false);
    time_us = timing.queued_median_us;
    isolated_us = timing.isolated_median_us;
    std::vector<std::unique_ptr<testing::DeviceBatch>> device_layers;
    for (testing::SyntheticBatch& layer : more_layers) {
      device_layers.push_back(std::make_unique<testing::DeviceBatch>(layer, env.device));
    }
    device_batch.poison_outputs();
    for (auto& layer : device_layers) layer->poison_outputs();
    run->enqueue(stream);
    for (auto& layer : device_layers) run->enqueue(layer_tensors(layer->problem()), stream);
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    device_batch.download_outputs();
    for (auto& layer : device_layers) layer->download_outputs();
    cudaStreamDestroy(stream);
  }
#endif
  if (!on_device) {
    const Problem problem = batch.problem();
    backend = describe_choices(runtime.select(problem));
    auto run = runtime.prepare(problem, {}, nullptr);
    progress.phase(fmt::format("running {} time(s) on {}", flags.repeat, backend));
    // Every timed run writes the whole output, so the last one is what the
    // check reads: poisoned before the first, no extra run.
    batch.poison_outputs();
    time_us = time_host(*run, flags.repeat);
    isolated_us = time_us;
    for (testing::SyntheticBatch& layer : more_layers) {
      layer.poison_outputs();
      run->enqueue(layer_tensors(layer.problem()), nullptr);
    }
  }

  // Every layer must pass; the worst one is reported.
  progress.phase("checking against the float64 reference");
  LayerCheck worst = check_layer(batch);
  bool pass = worst.pass;
  for (testing::SyntheticBatch& layer : more_layers) {
    const LayerCheck c = check_layer(layer);
    pass = pass && c.pass;
    if ((worst.pass && !c.pass) || (worst.pass == c.pass && c.error.rel_l2_err > worst.error.rel_l2_err)) worst = c;
  }
  const testing::Comparison& error = worst.error;
  const testing::StatsComparison& stats_error = worst.stats_error;
  const double tolerance = testing::output_tolerance(batch.spec().kv_dtype);
  const bool stats = batch.spec().stats;
  const bool stats_ok = worst.stats_ok;

  if (flags.json) {
    nlohmann::json out = {{"backend", backend},         {"time_us", time_us}, {"isolated_us", isolated_us},
                          {"max_abs_err", error.max_abs_err}, {"rel_l2_err", error.rel_l2_err},
                          {"non_finite", error.non_finite},   {"pass", pass},
                          {"device", on_device ? "cuda" : "cpu"}, {"tokens", batch.num_tokens()},
                          {"layers", flags.layers}, {"cp", 1},
                          {"repeat", flags.repeat},           {"reference", testing::kNaiveReferenceName},
                          {"tolerance", tolerance}};
    if (stats) {
      out["stats_ok"] = stats_ok;
      out["stats_max_m_err"] = stats_error.max_m_err;
      out["stats_max_l_rel_err"] = stats_error.max_l_rel_err;
      out["stats_non_finite"] = stats_error.non_finite;
      out["stats_empty_mismatches"] = stats_error.empty_mismatches;
    }
    std::cout << out.dump() << "\n";
  } else {
    const auto& spec = batch.spec();
    std::cout << fmt::format("helixmla run: {} heads, {} generations x q_len {}, {} contexts, page {}, kv {} on {}{}\n",
                             spec.heads, spec.generations, spec.q_len, spec.contexts, spec.page_size,
                             to_string(spec.kv_dtype), on_device ? "the GPU" : "the CPU",
                             flags.layers > 1 ? fmt::format(", {} layers through one prepared run (time: the first layer's; errors: "
                                                            "the worst layer's)",
                                                            flags.layers)
                                              : "");
    const std::size_t width = std::max<std::size_t>(40, backend.size());
    std::cout << fmt::format("{:<{}} {:>12} {:>12} {:>12} {:>12}{}\n", "backend", width, "time_us", "isolated_us",
                             "max_abs_err", "rel_l2_err",
                             stats ? fmt::format(" {:>12} {:>12}", "stats_m_err", "stats_l_err") : "");
    std::cout << fmt::format("{:<{}} {:>12.1f} {:>12.1f} {:>12.3e} {:>12.3e}{}\n", backend, width, time_us, isolated_us,
                             error.max_abs_err, error.rel_l2_err,
                             stats ? fmt::format(" {:>12.3e} {:>12.3e}", stats_error.max_m_err, stats_error.max_l_rel_err)
                                   : "");
    if (stats && !stats_ok) {
      std::cout << fmt::format("stats: FAIL ({} non-finite, {} empty rows not reproduced; tolerance {:.0e})\n",
                               stats_error.non_finite, stats_error.empty_mismatches,
                               testing::stats_tolerance(batch.spec().kv_dtype));
    }
    std::cout << fmt::format("result: {} (relative L2 tolerance {:.0e}{})\n", pass ? "PASS" : "FAIL", tolerance,
                             error.non_finite ? fmt::format(", {} non-finite outputs", error.non_finite) : "");
  }
  return pass ? 0 : 1;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a synthetic batch on a backend and check it against an independent float64 computation");
  add_problem_flags(*cmd, flags->problem);
  cmd->add_option("--layers", flags->layers,
                  "Layers of the step (each its own Q, KV values and KV scale) run through one prepared run, "
                  "as an engine does; every layer is checked")
      ->capture_default_str()->transform(integer_in(1, 64));
  cmd->add_option("--cp", flags->cp, "Helix context-parallel ranks (>1 splits the KV over ranks)")
      ->capture_default_str()->transform(integer_in(1, 64));
  add_int_list(*cmd, "--devices", flags->devices, 0, std::numeric_limits<int>::max(),
               "One GPU per Helix rank, e.g. 0,1 (see --exchange; default: every rank in process on one GPU)");
  cmd->add_option("--repeat", flags->repeat, "Timed repetitions (the median is reported)")
      ->capture_default_str()->transform(integer_in(1, 100000));
  cmd->add_flag("--json", flags->json, "Print one JSON object instead of the table");
  add_helix_flags(*cmd, flags->helix);
  cmd->callback([flags, cmd] {
    require_known_backend(flags->problem.backend, builtin_backends(), "this build");
    // A bad HELIXMLA_DEVICE is reported before a large batch is built, not after.
    (void)Environment::detect();
    flags->helix.repeat = flags->repeat;
    const bool helix = flags->cp > 1 || !flags->devices.empty();
    if (flags->layers > 1 && helix) {
      throw CLI::ValidationError("--layers", "runs one GPU's batch; it does not combine with --cp or --devices");
    }
    // A flag that would change nothing is refused rather than dropped: the
    // user asked for something this run would not do.
    refuse_lengths_without_requests(*cmd, flags->problem);
    if (!helix) {
      for (const char* name : {"--exchange", "--no-graphs", "--no-baseline"}) {
        if (cmd->count(name) > 0) throw CLI::ValidationError(name, "applies to Helix runs only (--cp > 1 or --devices)");
      }
    } else if (flags->problem.stats) {
      throw CLI::ValidationError("--stats", "a Helix run combines its ranks' statistics into the output it checks; "
                                            "statistics are reported and judged without --cp and --devices");
    }
    const int code = helix ? run_helix_command(flags->problem, flags->cp, flags->devices, flags->json, flags->helix)
                           : run_single(*flags);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace helixmla::tools

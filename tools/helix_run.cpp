#include "helix_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compare.hpp"
#include "dist/helix_driver.hpp"
#include "dist/peer_exchange.hpp"
#include "helixmla/runtime.hpp"
#include "parallel_naive_attention.hpp"
#include "synthetic_batch.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "device_batch.hpp"
#include "gpu_measure.hpp"
#endif

namespace helixmla::tools {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Every named GPU must exist: a clear flag error instead of a CUDA failure later.
void require_devices(const std::vector<int>& devices) {
  int available = 0;
#if defined(HELIXMLA_WITH_CUDA)
  available = testing::cuda_device_count();
#endif
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || devices[i] >= available) {
      throw CLI::ValidationError("--devices", fmt::format("device {} at index {} does not exist: this machine has {} "
                                                          "CUDA GPU(s)",
                                                          devices[i], i, available));
    }
  }
}

dist::HelixMode choose_mode(const ProblemFlags& flags, int cp, const std::vector<int>& devices,
                            const std::string& exchange) {
  require_devices(devices);
  if ((exchange == "peer" || exchange == "nccl") && devices.size() < 2) {
    throw CLI::ValidationError("--exchange", exchange + " needs one GPU per rank: give --devices with cp entries");
  }
  if (devices.size() > 1) {
    if (static_cast<int>(devices.size()) != cp) {
      throw CLI::ValidationError("--devices", fmt::format("{} devices given for --cp {}: a GPU per rank "
                                                          "needs one device per rank",
                                                          devices.size(), cp));
    }
    if (exchange == "nccl") return dist::HelixMode::nccl;
    // The peer exchange is one kernel per step where NCCL takes a pack
    // kernel and its own (bench/RESULTS.md: case 7 at cp=2, 165.6 against
    // 178.2 us a step); it needs every pair of GPUs to reach each other.
    if (exchange == "peer" || dist::peer_exchange_possible(devices)) return dist::HelixMode::peer;
    return dist::HelixMode::nccl;
  }
  if (!devices.empty()) return dist::HelixMode::device;
#if defined(HELIXMLA_WITH_CUDA)
  if (flags.backend != "cpu" && testing::cuda_device_count() > 0) return dist::HelixMode::device;
#endif
  (void)flags;
  return dist::HelixMode::host;
}

std::string describe(dist::HelixMode mode, const std::vector<int>& devices) {
  switch (mode) {
    case dist::HelixMode::host: return "in process on the CPU";
    case dist::HelixMode::device:
      return fmt::format("in process on GPU {}", devices.empty() ? 0 : devices.front());
    case dist::HelixMode::nccl: return fmt::format("NCCL on GPUs {}", fmt::join(devices, ","));
    case dist::HelixMode::peer:
      return fmt::format("peer stores between GPUs {}", fmt::join(devices, ","));
  }
  return "";
}

struct Baseline {
  std::optional<double> us;         // one graph replay at a time
  std::optional<double> steady_us;  // graph replays back to back
  std::string note;
};

// The whole batch through the runtime on one GPU, without Helix.
Baseline time_baseline(testing::SyntheticBatch& batch, const RuntimeOptions& options, int device,
                       int repeat, bool graphs) {
  Baseline baseline;
#if defined(HELIXMLA_WITH_CUDA)
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  RuntimeOptions runtime_options = options;
  runtime_options.environment = Environment::detect();
  runtime_options.environment->device = device;
  Runtime runtime(runtime_options);
  testing::DeviceBatch device_batch(batch, device);
  const Problem problem = device_batch.problem();
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  {
    const StepPlan step = runtime.plan_step(problem);
    testing::DeviceBuffer workspace(step.workspace_bytes());
    auto run = step.prepare({workspace.data(), workspace.bytes()}, stream);
    const Timing timing = time_runs({run.get()}, stream, 1, repeat, graphs);
    baseline.us = timing.isolated_median_us;
    if (graphs) baseline.steady_us = timing.queued_mean_us;
  }
  cudaStreamDestroy(stream);
#else
  (void)batch, (void)options, (void)device, (void)repeat, (void)graphs;
  baseline.note = "no CUDA";
#endif
  return baseline;
}

}  // namespace

void add_helix_flags(CLI::App& command, HelixRunOptions& options) {
  // Callbacks rather than "{false}" defaults, which the help would print.
  command.add_flag_callback("--no-graphs", [&options] { options.graphs = false; },
                            "Helix on a GPU: skip timing whole-step CUDA graph replays");
  command.add_flag_callback("--no-baseline", [&options] { options.baseline = false; },
                            "Helix on a GPU: skip timing the batch without Helix on one GPU");
  command
      .add_option("--exchange", options.exchange,
                  "Helix over several --devices: peer (one kernel storing straight into the other "
                  "GPUs' memory; needs peer access), nccl, or auto (peer when every pair has it)")
      ->check(CLI::IsMember({"auto", "nccl", "peer"}))
      ->capture_default_str();
}

int run_helix_command(const ProblemFlags& flags, int cp, const std::vector<int>& devices, bool json,
                      const HelixRunOptions& options) {
  if (cp < 1) throw CLI::ValidationError("--cp", "must be at least 1");
  testing::SyntheticBatch batch(to_batch_spec(flags));
  const Problem global = batch.problem();

  dist::HelixDriverOptions driver_options;
  driver_options.cp = cp;
  driver_options.mode = choose_mode(flags, cp, devices, options.exchange);
  driver_options.devices = devices;
  driver_options.runtime.forced_backend = flags.backend;
  dist::HelixDriver driver(global, driver_options);
  const bool on_device = driver.mode() != dist::HelixMode::host;

  const int repeat = std::max(1, options.repeat);
  if (repeat > 1) driver.step();  // warm-up
  std::vector<double> attention, exchange, combine, total;
  for (int i = 0; i < repeat; ++i) {
    const dist::HelixStepTimes t = driver.step();
    attention.push_back(t.attention_us);
    exchange.push_back(t.exchange_us);
    combine.push_back(t.combine_us);
    total.push_back(t.total_us);
  }
  std::vector<std::byte> out(batch.out_bytes());
  driver.fetch_output(out.data(), nullptr);

  std::optional<double> graph_us;
  std::string graph_note;
  if (on_device && options.graphs) {
    std::vector<double> replays;
    for (int i = 0; i < repeat + 1; ++i) {
      const std::optional<double> us = driver.graph_step_us(&graph_note);
      if (!us) break;
      if (i > 0) replays.push_back(*us);  // the first replay warms up
    }
    if (!replays.empty()) graph_us = median(replays);
  }
  std::optional<dist::HelixStepTimes> steady;
  if (graph_us) steady = driver.graph_steady_times(repeat, &graph_note);
  // The reported step time comes from the graph, so its output is checked
  // too: poisoned, replayed once more, compared below like the eager one.
  std::vector<std::byte> graph_out;
  if (graph_us) {
    driver.poison_outputs();
    if (driver.graph_step_us(&graph_note)) {
      graph_out.resize(batch.out_bytes());
      driver.fetch_output(graph_out.data(), nullptr);
    }
  }
  Baseline baseline;
  if (on_device && options.baseline) {
    baseline = time_baseline(batch, driver_options.runtime, devices.empty() ? 0 : devices.front(),
                             repeat, options.graphs);
  }

  const std::vector<double> expected = testing::parallel_naive_attention(batch.problem()).out;
  const testing::Comparison error = testing::compare(out.data(), global.out_dtype, expected);
  const double tolerance = testing::output_tolerance(batch.spec().kv_dtype);
  bool pass = error.within(tolerance);
  std::optional<testing::Comparison> graph_error;
  if (!graph_out.empty()) {
    graph_error = testing::compare(graph_out.data(), global.out_dtype, expected);
    pass = pass && graph_error->within(tolerance);
  }

  const double step_us = graph_us.value_or(median(total));
  std::optional<double> speedup, steady_speedup;
  if (baseline.us && step_us > 0.0) speedup = *baseline.us / step_us;
  if (baseline.steady_us && steady && steady->total_us > 0.0) {
    steady_speedup = *baseline.steady_us / steady->total_us;
  }
  const std::string backends = driver.backends();

  if (json) {
    // Every key of a single run's object but isolated_us (README), so a
    // script reads either kind's time and verdict the same way. time_us is
    // timed as a single run's: calls back to back (the step's graph
    // replayed back to back) where that was measured, else the step alone.
    nlohmann::json j = {{"backend", backends},
                        {"cp", cp},
                        {"device", driver.mode() == dist::HelixMode::host ? "cpu" : "cuda"},
                        {"tokens", batch.num_tokens()},
                        {"layers", 1},
                        {"time_us", steady ? steady->total_us : step_us},
                        {"tolerance", tolerance},
                        {"mode", describe(driver.mode(), devices)},
                        {"exchange", driver.exchange_name()},
                        {"attention_us", median(attention)},
                        {"exchange_us", median(exchange)},
                        {"combine_us", median(combine)},
                        {"total_us", median(total)},
                        {"repeat", repeat},
                        {"max_abs_err", error.max_abs_err},
                        {"rel_l2_err", error.rel_l2_err},
                        {"non_finite", error.non_finite},
                        {"reference", testing::kNaiveReferenceName},
                        {"pass", pass}};
    j["graph_total_us"] = graph_us ? nlohmann::json(*graph_us) : nlohmann::json(nullptr);
    j["graph_rel_l2_err"] = graph_error ? nlohmann::json(graph_error->rel_l2_err) : nlohmann::json(nullptr);
    if (!graph_note.empty() && !graph_us) j["graph_note"] = graph_note;
    j["baseline_us"] = baseline.us ? nlohmann::json(*baseline.us) : nlohmann::json(nullptr);
    j["speedup"] = speedup ? nlohmann::json(*speedup) : nlohmann::json(nullptr);
    if (steady) {
      j["steady"] = {{"attention_us", steady->attention_us},
                     {"exchange_us", steady->exchange_us},
                     {"combine_us", steady->combine_us},
                     {"step_us", steady->total_us}};
    }
    j["baseline_steady_us"] =
        baseline.steady_us ? nlohmann::json(*baseline.steady_us) : nlohmann::json(nullptr);
    j["steady_speedup"] = steady_speedup ? nlohmann::json(*steady_speedup) : nlohmann::json(nullptr);
    std::cout << j.dump() << "\n";
  } else {
    const auto& spec = batch.spec();
    std::cout << fmt::format(
        "helixmla run --cp {}: {} heads, {} generations x q_len {}, {} contexts, page {}, kv {}; "
        "ranks {} ({})\n",
        cp, spec.heads, spec.generations, spec.q_len, spec.contexts, spec.page_size,
        to_string(spec.kv_dtype), describe(driver.mode(), devices), driver.exchange_name());
    std::cout << fmt::format("{:<32} {:>3} {:>13} {:>12} {:>11} {:>10} {:>10} {:>11} {:>10}\n",
                             "backend", "cp", "attention_us", "exchange_us", "combine_us",
                             "total_us", "graph_us", "max_abs_err", "rel_l2");
    std::cout << fmt::format(
        "{:<32} {:>3} {:>13.1f} {:>12.1f} {:>11.1f} {:>10.1f} {:>10} {:>11.3e} {:>10.3e}\n",
        backends, cp, median(attention), median(exchange), median(combine), median(total),
        graph_us ? fmt::format("{:.1f}", *graph_us) : std::string("-"), error.max_abs_err,
        error.rel_l2_err);
    if (!graph_us && !graph_note.empty()) std::cout << "graphs: " << graph_note << "\n";
    if (graph_error) {
      std::cout << fmt::format("graph replay output: rel L2 {:.3e}{}\n", graph_error->rel_l2_err,
                               graph_error->non_finite ? ", non-finite values" : "");
    }
    if (steady) {
      std::cout << fmt::format(
          "graph replays back to back: attention {:.1f} us, exchange {:.1f} us, combine {:.1f} us "
          "(each alone), whole step {:.1f} us\n",
          steady->attention_us, steady->exchange_us, steady->combine_us, steady->total_us);
    }
    if (baseline.us) {
      std::cout << fmt::format("without Helix on one GPU: {:.1f} us; whole-step speedup {:.2f}x\n",
                               *baseline.us, speedup.value_or(0.0));
    }
    if (baseline.steady_us && steady_speedup) {
      std::cout << fmt::format("back to back: without Helix {:.1f} us; whole-step speedup {:.2f}x\n",
                               *baseline.steady_us, *steady_speedup);
    }
    std::cout << fmt::format("result: {} against the {} (relative L2 tolerance {:.0e}{}), median of {}\n",
                             pass ? "PASS" : "FAIL", testing::kNaiveReferenceName, tolerance,
                             error.non_finite
                                 ? fmt::format(", {} non-finite outputs", error.non_finite)
                                 : "",
                             repeat);
  }
  return pass ? 0 : 1;
}

}  // namespace helixmla::tools

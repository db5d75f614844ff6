// `helixmla trace`: an engine's decode loop over one prepared run. Each step
// every request grows by its query tokens and, with probability 1/lifetime,
// is replaced by a new request of a random length; the engine refreshes its
// run for the step (StepPlan::refresh, which keeps a captured graph valid)
// and prepares a new one only when the refresh says no. Reports how often
// that happens, the host time of both, and what a refreshed run costs on
// the GPU against a run prepared for the same step (whose plan is the
// step's own), with their outputs compared.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "helixmla/error.hpp"
#include "helixmla/runtime.hpp"
#include "integer_flag.hpp"
#include "problem_flags.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "compare.hpp"
#include "device_batch.hpp"
#include "gpu_measure.hpp"
#endif

namespace helixmla::tools {

namespace {

struct TraceFlags {
  ProblemFlags problem;
  int steps = 512;
  int lifetime = 1000;
  double padding = 0.0;
  int every = 4;
  int iterations = 10;
};

#if defined(HELIXMLA_WITH_CUDA)

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1))];
}

double microseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

// Downloads an output tensor as doubles.
std::vector<double> output_values(const void* device, DType dtype, std::int64_t values) {
  std::vector<std::byte> raw(static_cast<std::size_t>(values) * dtype_size(dtype));
  cuda_ok(cudaMemcpy(raw.data(), device, raw.size(), cudaMemcpyDeviceToHost), "download output");
  std::vector<double> out(static_cast<std::size_t>(values));
  for (std::int64_t i = 0; i < values; ++i) out[static_cast<std::size_t>(i)] = load_as_float(raw.data(), dtype, i);
  return out;
}

void run_trace(const TraceFlags& flags) {
  require_cuda_gpu(Environment::detect(), "trace");
  const ProblemFlags& pf = flags.problem;
  const auto [shortest, longest] = std::minmax_element(pf.kv_len.begin(), pf.kv_len.end());
  std::uniform_int_distribution<std::int32_t> new_length(*shortest, *longest);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::mt19937_64 rng(pf.seed);

  // Every request slot owns pages for its longest possible length, so the
  // page table (and its width) stays that of the first step, as an engine's
  // fixed-width block table does.
  ProblemFlags room = pf;
  room.kv_len = {*longest + flags.steps * pf.q_len};
  testing::DeviceSyntheticBatch batch(to_batch_spec(room, false));
  std::vector<std::int32_t> kv_len(static_cast<std::size_t>(pf.batch));
  for (std::int32_t& length : kv_len) length = new_length(rng);
  std::vector<bool> padding(kv_len.size(), false);  // slots an engine pads with q_len tokens of KV
  const auto problem_now = [&] {
    Problem p = batch.problem();
    p.kv_len = kv_len;
    return p;
  };

  RuntimeOptions options;
  options.forced_backend = pf.backend;
  const Runtime runtime(options);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const Problem first = problem_now();
  // Workspaces grow (to twice what a step needs) when a run is prepared for
  // a step that needs more: a refreshed run keeps the one it was given.
  testing::DeviceBuffer workspace, fresh_workspace;
  const auto prepare_in = [&](const StepPlan& plan, testing::DeviceBuffer& buffer) {
    const std::size_t needed = plan.workspace_bytes();
    if (buffer.bytes() < needed) buffer = testing::DeviceBuffer(2 * needed);
    return plan.prepare({buffer.data(), buffer.bytes()}, stream);
  };
  const std::int64_t out_values = first.num_tokens() * first.num_heads * first.dims.kv_lora_rank;
  testing::DeviceBuffer fresh_out(static_cast<std::size_t>(out_values) * dtype_size(first.out_dtype));

  std::unique_ptr<PreparedRun> run = prepare_in(runtime.plan_step(first), workspace);
  int refreshed = 0, prepared = 0;
  std::vector<double> refresh_us, prepare_us, ratios;
  double worst_l2 = 0.0;
  const double tolerance = testing::output_tolerance(first.kv.dtype);
  for (int step = 1; step <= flags.steps; ++step) {
    for (std::size_t r = 0; r < kv_len.size(); ++r) {
      if (flags.lifetime > 0 && unit(rng) * flags.lifetime < 1.0) {
        padding[r] = unit(rng) < flags.padding;
        kv_len[r] = padding[r] ? pf.q_len : new_length(rng);
      } else if (!padding[r]) {
        kv_len[r] += pf.q_len;
      }
    }
    const Problem p = problem_now();
    const auto start = std::chrono::steady_clock::now();
    const StepPlan plan = runtime.plan_step(p);
    if (plan.refresh(*run, stream)) {
      refresh_us.push_back(microseconds_since(start));
      ++refreshed;
    } else {
      run.reset();
      run = prepare_in(plan, workspace);
      prepare_us.push_back(microseconds_since(start));
      ++prepared;
    }
    if (step % flags.every != 0) continue;
    // The same step through a run of its own plan, into another output.
    std::unique_ptr<PreparedRun> fresh = prepare_in(plan, fresh_workspace);
    LayerTensors fresh_layer = layer_tensors(p);
    fresh_layer.out = fresh_out.data();
    const double taken = median_enqueue_us(stream, 2, flags.iterations, [&](int) { run->enqueue(stream); });
    const double own = median_enqueue_us(stream, 2, flags.iterations, [&](int) { fresh->enqueue(fresh_layer, stream); });
    ratios.push_back(taken / own);
    cuda_ok(cudaStreamSynchronize(stream), "trace step");
    const std::vector<double> reference = output_values(fresh_out.data(), p.out_dtype, out_values);
    std::vector<std::byte> raw(static_cast<std::size_t>(out_values) * dtype_size(p.out_dtype));
    cuda_ok(cudaMemcpy(raw.data(), p.out, raw.size(), cudaMemcpyDeviceToHost), "download output");
    const testing::Comparison c = testing::compare(raw.data(), p.out_dtype, reference);
    worst_l2 = std::max(worst_l2, c.non_finite ? 1e300 : c.rel_l2_err);
    if (step % 64 == 0 || step == flags.steps) {
      std::cerr << fmt::format("step {}/{}: {} refreshed, {} prepared anew\n", step, flags.steps, refreshed, prepared);
    }
  }
  cuda_ok(cudaStreamDestroy(stream), "stream");

  fmt::print("{} steps of {} requests ({} heads, q_len {}, {} KV, page {}; lengths {}-{}, replaced after ~{} steps, "
             "{:.0f}% of them by padding)\n",
             flags.steps, pf.batch, pf.heads, pf.q_len, pf.kv_dtype, pf.page_size, *shortest, *longest,
             flags.lifetime, 100.0 * flags.padding);
  fmt::print("  refreshed {} ({:.1f}%), prepared anew {}\n", refreshed, 100.0 * refreshed / flags.steps, prepared);
  if (!refresh_us.empty()) fmt::print("  host per step: plan_step + refresh median {:.1f} us\n", percentile(refresh_us, 0.5));
  if (!prepare_us.empty()) fmt::print("  host per step: plan_step + prepare median {:.1f} us\n", percentile(prepare_us, 0.5));
  if (!ratios.empty()) {
    double mean = 0.0;
    for (double r : ratios) mean += r;
    mean /= static_cast<double>(ratios.size());
    fmt::print("  GPU time, run as refreshed / run of the step's own plan ({} steps, median of {} queued calls each): "
               "mean {:.3f}, p90 {:.3f}, max {:.3f}\n",
               ratios.size(), flags.iterations, mean, percentile(ratios, 0.9), percentile(ratios, 1.0));
    fmt::print("  outputs against the own plan's: worst rel L2 {:.2e} (tolerance {:.0e})\n", worst_l2, tolerance);
  }
  if (!(worst_l2 <= tolerance)) {
    fmt::print("FAIL: a refreshed run's output differs from its step's own plan's\n");
    throw CLI::RuntimeError(1);
  }
}

#endif

}  // namespace

void add_trace_command(CLI::App& app) {
  auto flags = std::make_shared<TraceFlags>();
  flags->problem.heads = 48;
  flags->problem.batch = 64;
  flags->problem.kv_len = {1024, 16384};
  CLI::App* cmd = app.add_subcommand(
      "trace", "Decode steps through one prepared run, refreshed each step as under a captured CUDA graph (GPU)");
  add_problem_flags(*cmd, flags->problem);
  // trace draws every request's length from a range instead of cycling a list.
  cmd->get_option("--kv-len")
      ->description("Cached tokens per generation, new tokens included: each request's first length, and each "
                    "replacement's, is drawn between the smallest and largest of these values");
  cmd->add_option("--steps", flags->steps, "Decode steps")->capture_default_str()->transform(integer_in(1, 1 << 20));
  cmd->add_option("--lifetime", flags->lifetime,
                  "Mean steps before a request is replaced by one of a random length (0: never); lengths are "
                  "drawn between the smallest and largest --kv-len")
      ->capture_default_str()->transform(integer_in(0, 1 << 30));
  cmd->add_option("--padding", flags->padding,
                  "Share of replaced requests that become padding (q_len tokens of KV, as an engine pads its "
                  "batch to a captured size) until replaced in turn")
      ->capture_default_str()
      ->check([](const std::string& value) {
        // Spelled out: CLI::Range lets nan through (every comparison with it is false).
        char* end = nullptr;
        const double share = std::strtod(value.c_str(), &end);
        return end != value.c_str() && *end == '\0' && share >= 0.0 && share <= 1.0
                   ? std::string()
                   : "'" + value + "' is not a share in [0, 1]";
      });
  cmd->add_option("--every", flags->every, "Time and check every Nth step against a run of its own plan")
      ->capture_default_str()->transform(integer_in(1, 1 << 20));
  cmd->add_option("--iterations", flags->iterations, "Queued calls timed per checked step")
      ->capture_default_str()->transform(integer_in(1, 10000));
  cmd->callback([flags, cmd] {
    if (flags->problem.contexts > 0) {
      throw CLI::ValidationError("--contexts", "trace runs decode steps: generations only");
    }
    if (flags->problem.batch < 1) throw CLI::ValidationError("--batch", "trace needs at least one generation");
    refuse_lengths_without_requests(*cmd, flags->problem);
    require_known_backend(flags->problem.backend, builtin_backends(), "this build");
    if (flags->problem.backend == "cpu") {
      throw CLI::ValidationError("--backend", "trace times runs on the GPU; cpu is not a GPU backend");
    }
    const std::int32_t shortest = *std::min_element(flags->problem.kv_len.begin(), flags->problem.kv_len.end());
    if (shortest < flags->problem.q_len) {
      throw CLI::ValidationError("--kv-len", "the shortest length " + std::to_string(shortest) +
                                                 " is below --q-len " + std::to_string(flags->problem.q_len) +
                                                 ": new tokens are part of the KV");
    }
    // Every slot owns pages for the longest length grown by every step
    // (run_trace), which --kv-len's own bound must hold too.
    const std::int64_t longest = *std::max_element(flags->problem.kv_len.begin(), flags->problem.kv_len.end());
    const std::int64_t room = longest + static_cast<std::int64_t>(flags->steps) * flags->problem.q_len;
    if (room > (1 << 30)) {
      throw CLI::ValidationError("--steps", fmt::format("the longest --kv-len {} grown by --steps {} x --q-len {} is "
                                                        "{} tokens, past the 2^30 a request may hold",
                                                        longest, flags->steps, flags->problem.q_len, room));
    }
#if defined(HELIXMLA_WITH_CUDA)
    run_trace(*flags);
#else
    throw RuntimeFailure("trace needs a CUDA GPU; this build has no CUDA");
#endif
  });
}

}  // namespace helixmla::tools

// Runtimes shared by host threads, as an engine with a thread per stream
// (or per GPU) shares them: each thread prepares and enqueues its own
// batches on its own stream while the others do, so the selector's cache,
// the per-thread plans, the kernel lookups, the pinned staging pool and the
// SM-count cache are all used at once. Every run is checked against the
// float64 reference, with its outputs poisoned before it.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda/generic_backend.hpp"
#include "device_batch.hpp"
#include "gpu/gpu_test_support.hpp"
#include "helixmla/runtime.hpp"
#include "support/gpu_skip.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {
namespace {

BatchSpec spec_of(std::int32_t heads, std::int32_t q_len, std::vector<std::int32_t> kv_len, std::int32_t page,
                  DType kv, std::uint64_t seed) {
  BatchSpec spec;
  spec.heads = heads;
  spec.q_len = q_len;
  spec.generations = static_cast<std::int32_t>(kv_len.size());
  spec.kv_len = std::move(kv_len);
  spec.page_size = page;
  spec.use_kv_dtype(kv);
  spec.seed = seed;
  return spec;
}

// Two batches a thread, run in turn: every round changes the phase each
// thread plans, so no cache answers for long.
std::vector<std::vector<BatchSpec>> thread_specs() {
  BatchSpec mixed = spec_of(128, 1, {2000, 900}, 64, DType::bf16, 31);
  mixed.contexts = 1;
  mixed.context_len = 40;
  BatchSpec with_stats = spec_of(48, 1, {5000, 300, 17}, 64, DType::fp8_e4m3, 21);
  with_stats.stats = true;
  return {
      {spec_of(16, 1, {3000, 64, 700, 12000, 9}, 64, DType::bf16, 11),
       spec_of(16, 2, {4000, 513, 90}, 16, DType::fp8_e4m3, 12)},
      {with_stats, spec_of(48, 2, {7000, 65}, 32, DType::fp8_e4m3, 22)},
      {mixed, spec_of(64, 4, {1500, 3300}, 64, DType::bf16, 32)},
      {spec_of(96, 1, {9000, 1, 2500}, 128, DType::bf16, 41), spec_of(24, 3, {600, 20000}, 64, DType::bf16, 42)},
  };
}

// A batch with its reference and device copy, and a workspace either
// runtime's plan fits in (allocated up front: cudaFree would synchronise the
// device under the threads).
struct ThreadBatch {
  ThreadBatch(const BatchSpec& spec, const std::vector<std::unique_ptr<Runtime>>& runtimes)
      : host(spec), reference(parallel_naive_attention(host.problem())), device(host) {
    std::size_t bytes = 0;
    for (const auto& runtime : runtimes) bytes = std::max(bytes, runtime->workspace_bytes(device.problem()));
    workspace = DeviceBuffer(bytes);
  }
  SyntheticBatch host;
  NaiveResult reference;
  DeviceBatch device;
  DeviceBuffer workspace;
};

TEST(ConcurrentRunsGpu, ThreadsSharingRuntimesEachMatchTheReference) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const Environment env = Environment::detect();
  if (!cuda::make_generic_backend()->available(env)) GTEST_SKIP() << "no CUDA backend available";
  RuntimeOptions generic;
  generic.forced_backend = "cuda_generic";
  generic.environment = env;
  // The selector's choice (the tensor-core backend where it runs) and the
  // generic backend, alternating by round and thread.
  const std::vector<std::unique_ptr<Runtime>> runtimes = [&] {
    std::vector<std::unique_ptr<Runtime>> r;
    r.push_back(std::make_unique<Runtime>());
    r.push_back(std::make_unique<Runtime>(generic));
    return r;
  }();
  const std::vector<std::vector<BatchSpec>> specs = thread_specs();
  std::vector<std::vector<std::unique_ptr<ThreadBatch>>> batches(specs.size());
  for (std::size_t t = 0; t < specs.size(); ++t) {
    for (const BatchSpec& spec : specs[t]) batches[t].push_back(std::make_unique<ThreadBatch>(spec, runtimes));
  }
  constexpr int kRounds = 8;
  std::latch start(static_cast<std::ptrdiff_t>(specs.size()));
  std::vector<int> runs(specs.size(), 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      try {
        TestStream stream;
        for (int round = 0; round < kRounds; ++round) {
          ThreadBatch& b = *batches[t][static_cast<std::size_t>(round) % batches[t].size()];
          const Runtime& runtime = *runtimes[(static_cast<std::size_t>(round) / 2 + t) % runtimes.size()];
          const std::string label = "thread " + std::to_string(t) + " round " + std::to_string(round) + " on " +
                                    (runtime.options().forced_backend.empty() ? "the selector's choice"
                                                                              : runtime.options().forced_backend);
          const Problem problem = b.device.problem();
          const StepPlan step = runtime.plan_step(problem);
          ASSERT_LE(step.workspace_bytes(), b.workspace.bytes()) << label;
          b.device.poison_outputs();
          auto run = step.prepare({b.workspace.data(), b.workspace.bytes()}, stream.get());
          run->enqueue(stream.get());
          stream.synchronize();
          b.device.download_outputs();
          expect_matches(b.host, b.reference, label);
          ++runs[t];
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (std::size_t t = 0; t < specs.size(); ++t) EXPECT_EQ(runs[t], kRounds) << "thread " << t;
}

}  // namespace
}  // namespace helixmla::testing

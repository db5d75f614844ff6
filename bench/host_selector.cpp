// Host cost of choosing a backend: a cached select must cost far less than a
// kernel launch (target well under 100 ns), an uncached one under 5 us.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/sweep.hpp"
#if defined(HELIXMLA_WITH_CUDA)
#include "cuda/tensorcore_plan.hpp"
#include "cuda/tensorcore_variants.hpp"
#endif
#include "helixmla/planner.hpp"
#include "helixmla/profile.hpp"
#include "helixmla/runtime.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

#if defined(HELIXMLA_WITH_CUDA)
constexpr Arch kBuiltinArch = Arch::sm90;
constexpr bool kDeviceTensors = true;
#else
constexpr Arch kBuiltinArch = Arch::none;
constexpr bool kDeviceTensors = false;
#endif

PhaseShape decode(std::int32_t heads, std::int32_t page, bool helix, bool on_device) {
  PhaseShape s;
  s.num_heads = heads;
  s.page_size = page;
  s.batch_bucket = 32;
  s.helix = helix;
  s.cp_size = helix ? 4 : 1;
  s.has_stats = helix;
  s.on_device = on_device;
  return s;
}

Selector builtin_selector() {
  const auto backends = builtin_backends();
  return Selector(backends, sweep_environment(backends, kBuiltinArch));
}

Selector trtllm_selector() {
  const auto backends = load_profile("trtllm").backends;
  return Selector(backends, sweep_environment(backends, Arch::sm103));
}

// 256 distinct shapes visited in turn, so the cache lookups are not one hot line.
std::vector<PhaseShape> many_shapes(bool on_device) {
  std::vector<PhaseShape> shapes;
  for (std::int32_t heads = 1; heads <= 128; ++heads) {
    for (bool helix : {false, true}) shapes.push_back(decode(heads, 64, helix, on_device));
  }
  return shapes;
}

void BM_SelectCachedBuiltin(benchmark::State& state) {
  const Selector selector = builtin_selector();
  const PhaseShape shape = decode(128, 64, false, kDeviceTensors);
  selector.select(shape);
  for (auto _ : state) benchmark::DoNotOptimize(&selector.select(shape));
}
BENCHMARK(BM_SelectCachedBuiltin);

void BM_SelectCachedBuiltinManyShapes(benchmark::State& state) {
  const Selector selector = builtin_selector();
  const auto shapes = many_shapes(kDeviceTensors);
  for (const PhaseShape& s : shapes) selector.select(s);
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(&selector.select(shapes[i]));
    i = (i + 1) % shapes.size();
  }
}
BENCHMARK(BM_SelectCachedBuiltinManyShapes);

void BM_SelectUncachedBuiltin(benchmark::State& state) {
  const Selector selector = builtin_selector();
  const PhaseShape shape = decode(128, 64, false, kDeviceTensors);
  for (auto _ : state) benchmark::DoNotOptimize(selector.select_uncached(shape));
}
BENCHMARK(BM_SelectUncachedBuiltin);

void BM_SelectCachedTrtllm(benchmark::State& state) {
  const Selector selector = trtllm_selector();
  const PhaseShape kimi = decode(48, 64, true, true);
  selector.select(kimi);
  for (auto _ : state) benchmark::DoNotOptimize(&selector.select(kimi));
}
BENCHMARK(BM_SelectCachedTrtllm);

void BM_SelectUncachedTrtllm(benchmark::State& state) {
  const Selector selector = trtllm_selector();
  const PhaseShape kimi = decode(48, 64, true, true);
  for (auto _ : state) benchmark::DoNotOptimize(selector.select_uncached(kimi));
}
BENCHMARK(BM_SelectUncachedTrtllm);

// What a runtime call adds before selecting: split the batch and derive the shape.
void BM_PlanAndShapeOfMixedBatch(benchmark::State& state) {
  testing::BatchSpec spec;
  spec.heads = 48;
  spec.contexts = 2;
  spec.generations = 32;
  spec.q_len = 2;
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const Problem whole = batch.problem();
  for (auto _ : state) {
    const PhasePlan plan = plan_phases(whole);
    benchmark::DoNotOptimize(shape_of(*plan.context, whole));
    benchmark::DoNotOptimize(shape_of(*plan.generation, whole));
  }
}
BENCHMARK(BM_PlanAndShapeOfMixedBatch);

#if defined(HELIXMLA_WITH_CUDA)
// The tensor-core backend's work plan (row tiles, the split search, the
// workspace layout), built by workspace_bytes and again by prepare on every
// step: suite cases 3 (64 x 8192 tokens, 64 heads), 1 (128 x 4096, 128
// heads), 8 (one 32768-token request) and 7 (8 x 131072, 16 heads), on an
// H200's 132 (64-row) or 264 (16-row) block slots. A fourth argument of 1
// makes requests 1.. short (2048 + 61 i tokens, bench/mixed-length-probe.csv):
// one long request among short ones, whose split search runs furthest; 2
// gives them suite case 9's spread (1024 + (i * 7919) % 15361).
void BM_TensorcorePlan(benchmark::State& state) {
  testing::BatchSpec spec;
  spec.heads = static_cast<std::int32_t>(state.range(0));
  spec.generations = static_cast<std::int32_t>(state.range(1));
  spec.kv_len = {static_cast<std::int32_t>(state.range(2))};
  if (state.range(3) == 1) {
    for (std::int32_t i = 1; i < spec.generations; ++i) spec.kv_len.push_back(2048 + 61 * i);
  } else if (state.range(3) == 2) {
    for (std::int32_t i = 1; i < spec.generations; ++i) spec.kv_len.push_back(1024 + (i * 7919) % 15361);
  }
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const Problem problem = batch.problem();
  const cuda::TensorcoreVariant variant = cuda::tensorcore_variant(
      spec.heads, 1, spec.page_size, spec.q_dtype, spec.kv_dtype, batch_bucket_of(problem.num_requests()));
  const std::int32_t slots = cuda::tensorcore_block_slots(132, variant);  // an H200's SMs
  for (auto _ : state) {
    benchmark::DoNotOptimize(cuda::plan_tensorcore(problem, variant.rows, slots).workspace_bytes);
  }
}
BENCHMARK(BM_TensorcorePlan)
    ->Args({64, 64, 8192, 0})
    ->Args({128, 128, 4096, 0})
    ->Args({128, 1, 32768, 0})
    ->Args({16, 8, 131072, 0})
    ->Args({128, 64, 131072, 1})
    ->Args({16, 64, 1048576, 1})
    ->Args({128, 64, 1024, 2})
    ->Args({16, 64, 1024, 2});

// What a refresh of a captured tensor-core run does on the host
// (TensorcoreSplitSearch::plan_to_refresh; a plan launches alike here when
// it has as many items as the prepared one, the grid the run launches).
// One 131072-token request among 63 short ones (the mixed-length probe) at
// `heads` (128: 64-row tiles on 132 slots; 16: 16-row tiles on 264), the
// prepared step against the next: 0 every request a token longer, 1 the
// long request moved to another slot, 2 it finished.
void BM_TensorcoreRefreshSearch(benchmark::State& state) {
  testing::BatchSpec spec;
  spec.heads = static_cast<std::int32_t>(state.range(0));
  spec.generations = 64;
  spec.kv_len = {131072};
  for (std::int32_t i = 1; i < spec.generations; ++i) spec.kv_len.push_back(2048 + 61 * i);
  spec.allocate_tensors = false;
  testing::BatchSpec next_spec = spec;
  if (state.range(1) == 0) {
    for (std::int32_t& len : next_spec.kv_len) ++len;
  } else {
    next_spec.kv_len[0] = 3000;
    if (state.range(1) == 1) next_spec.kv_len[5] = 131072;
  }
  testing::BatchSpec other_spec = spec;
  other_spec.generations = 1;
  other_spec.kv_len = {64};
  testing::SyntheticBatch step(spec), next_step(next_spec), other_step(other_spec);
  const Problem prepared_phase = step.problem();
  const Problem next = next_step.problem();
  const Problem other = other_step.problem();
  const std::int32_t rows = spec.heads == 16 ? 16 : 64;
  const std::int32_t slots = spec.heads == 16 ? 264 : 132;
  const cuda::TensorcorePlan prepared = cuda::plan_tensorcore(prepared_phase, rows, slots);
  const auto launches_alike = [&](const cuda::TensorcorePlan& plan) {
    return plan.items.size() == prepared.items.size();
  };
  for (auto _ : state) {
    // A one-request phase planned in between, so that the thread's
    // remembered plan is not this step's (a refresh meets a new step).
    cuda::tensorcore_plan_for(other, rows, slots);
    const cuda::TensorcoreSplitSearch search(next, rows, slots);
    benchmark::DoNotOptimize(search.plan_to_refresh(prepared, launches_alike));
  }
}
BENCHMARK(BM_TensorcoreRefreshSearch)->ArgsProduct({{128, 16}, {0, 1, 2}});

// The second of the two plans a step asks for (workspace_bytes, then
// prepare): the thread's last plan, found by comparing the inputs.
void BM_TensorcorePlanReused(benchmark::State& state) {
  testing::BatchSpec spec;
  spec.heads = 64;
  spec.generations = 64;
  spec.kv_len = {8192};
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const Problem problem = batch.problem();
  cuda::tensorcore_plan_for(problem, 64, 132);
  for (auto _ : state) benchmark::DoNotOptimize(cuda::tensorcore_plan_for(problem, 64, 132)->workspace_bytes);
}
BENCHMARK(BM_TensorcorePlanReused);
#endif

}  // namespace
}  // namespace helixmla

BENCHMARK_MAIN();

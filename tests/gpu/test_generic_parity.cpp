// The cuda_generic backend against the float64 reference: the heads x page
// size x q_len x KV dtype sweep, mixed batches, Helix bounds and statistics,
// split-KV, non-default dims, caller workspaces and CUDA graph replay. Plus
// the backend's capability answers, which need no GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compare.hpp"
#include "cuda/generic_backend.hpp"
#include "cuda/generic_work_plan.hpp"
#include "cuda/sm_count.hpp"
#include "cuda/split_combine.hpp"
#include "device_batch.hpp"
#include "gpu/gpu_test_support.hpp"
#include "helixmla/error.hpp"
#include "helixmla/validate.hpp"
#include "support/gpu_skip.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {
namespace {

void check_cuda(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

// Runs the generic backend on `host` mirrored to the device and compares
// outputs (and stats when present) with the float64 reference.
void expect_parity(SyntheticBatch& host, const std::string& label, int expected_phases = 0) {
  const BackendPtr backend = cuda::make_generic_backend();
  DeviceBatch device(host);
  TestStream stream;
  device.poison_outputs();
  const int phases = run_backend_phases(*backend, device.problem(), stream.get());
  if (expected_phases > 0) EXPECT_EQ(phases, expected_phases) << label;
  device.download_outputs();
  expect_matches_reference(host, label);
}

// Generations of `q_len` tokens over `kv_len`, KV stored with scale 0.05
// whatever its dtype, statistics on.
BatchSpec generic_spec(std::int32_t heads, std::int32_t page, std::int32_t q_len, std::vector<std::int32_t> kv_len,
                       DType kv) {
  BatchSpec spec;
  spec.heads = heads;
  spec.page_size = page;
  spec.q_len = q_len;
  spec.generations = static_cast<std::int32_t>(kv_len.size());
  spec.kv_len = std::move(kv_len);
  spec.kv_dtype = kv;
  spec.q_dtype = default_q_dtype(kv);
  spec.kv_scale = 0.05f;
  spec.stats = true;
  return spec;
}

// ---------------------------------------------------------------- sweep

struct SweepCase {
  std::int32_t heads;
  std::int32_t page_size;
  std::int32_t q_len;
  DType kv_dtype;
};

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> cases;
  for (std::int32_t heads : {1, 16, 24, 48, 64, 96, 128}) {
    for (std::int32_t page : {1, 16, 32, 64, 128}) {
      for (std::int32_t q_len : {1, 2, 4}) {
        for (DType kv : {DType::bf16, DType::fp16, DType::fp8_e4m3}) cases.push_back({heads, page, q_len, kv});
      }
    }
  }
  return cases;
}

std::string sweep_name(const ::testing::TestParamInfo<SweepCase>& info) {
  const SweepCase& c = info.param;
  return fmt::format("H{}_page{}_q{}_{}", c.heads, c.page_size, c.q_len, to_string(c.kv_dtype));
}

class GenericParity : public ::testing::TestWithParam<SweepCase> {};

TEST_P(GenericParity, MatchesReference) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const SweepCase& c = GetParam();
  // Odd lengths, a partial last page, and one exact multiple of the page.
  BatchSpec spec =
      generic_spec(c.heads, c.page_size, c.q_len, {613, 3 * c.page_size + 37, 2 * c.page_size + 64}, c.kv_dtype);
  // fp8 KV runs with both query types across the sweep.
  if (c.kv_dtype == DType::fp8_e4m3 && (c.page_size == 1 || c.page_size == 64)) spec.q_dtype = DType::fp16;
  spec.seed = static_cast<std::uint64_t>(c.heads * 1000003 + c.page_size * 1009 + c.q_len * 31) +
              static_cast<std::uint64_t>(c.kv_dtype);
  SyntheticBatch host(spec);
  expect_parity(host, sweep_name({c, 0}), 1);
}

INSTANTIATE_TEST_SUITE_P(Sweep, GenericParity, ::testing::ValuesIn(sweep_cases()), sweep_name);

// ---------------------------------------------------------------- batches

TEST(GenericMixedBatch, ContextsAndGenerationsRunAsTwoPhases) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  struct Mixed {
    std::int32_t heads, page, context_len, q_len;
    DType kv;
  };
  for (const Mixed& m : {Mixed{16, 16, 301, 2, DType::bf16}, Mixed{128, 1, 77, 4, DType::fp8_e4m3},
                         Mixed{24, 64, 129, 1, DType::fp16}}) {
    BatchSpec spec = generic_spec(m.heads, m.page, m.q_len, {300, 45, 129}, m.kv);
    spec.contexts = 2;
    spec.context_len = m.context_len;
    spec.seed = 7 + m.heads;
    SyntheticBatch host(spec);
    expect_parity(host, fmt::format("mixed H{} page{} ctx{}", m.heads, m.page, m.context_len), 2);
  }
}

TEST(GenericHelix, BoundsReplaceTheMaskAndEmptyRowsAreExact) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  BatchSpec spec;
  // Four heads keep each request's 12 rows in one block, so a token with
  // bound 0 shares a split KV range with tokens that see 650 and 700 positions.
  spec.heads = 4;
  spec.page_size = 16;
  spec.generations = 4;
  spec.q_len = 3;
  spec.kv_len = {50, 130, 1, 700};
  spec.stats = true;
  spec.seed = 99;
  SyntheticBatch host(spec);
  // Request 0 sees nothing; request 3's first token sees nothing while its
  // others need a split range, so the combine meets rows whose splits are all
  // empty.
  const std::vector<std::int32_t> bounds = {0, 0, 0, 10, 10, 64, 0, 1, 1, 0, 650, 700};
  const BackendPtr backend = cuda::make_generic_backend();
  DeviceBatch device(host);
  TestStream stream;
  device.poison_outputs();
  Problem device_problem = device.problem();
  device_problem.helix = {.cp_size = 2, .cp_rank = 1, .token_kv_bounds = bounds};
  EXPECT_FALSE(cuda::plan_generic_work(device_problem, cuda::device_sm_count(0)).segments.empty());
  run_backend_phases(*backend, device_problem, stream.get());
  device.download_outputs();

  expect_matches_reference(host, "helix bounds", device_problem.helix);
  const std::int64_t rank = device_problem.dims.kv_lora_rank;
  for (std::int64_t token = 0; token < static_cast<std::int64_t>(bounds.size()); ++token) {
    if (bounds[token] != 0) continue;
    for (std::int64_t i = token * spec.heads * rank; i < (token + 1) * spec.heads * rank; ++i) {
      ASSERT_EQ(load_as_float(host.out_.data(), device_problem.out_dtype, i), 0.0f)
          << "token " << token << " element " << i;
    }
    for (std::int64_t h = 0; h < spec.heads; ++h) {
      EXPECT_EQ(host.stats_[(token * spec.heads + h) * 2], -INFINITY);
      EXPECT_EQ(host.stats_[(token * spec.heads + h) * 2 + 1], 0.0f);
    }
  }
}

// A rank that holds none of a request's pages yet has local kv_len 0; single
// tokens need no bounds there (the plain mask sees the whole local KV).
TEST(GenericHelix, SingleTokensOfARankHoldingNothingNeedNoBounds) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    BatchSpec spec = generic_spec(16, 16, 1, {0, 700, 0, 45}, kv);
    spec.seed = 131;
    SyntheticBatch host(spec);
    const BackendPtr backend = cuda::make_generic_backend();
    DeviceBatch device(host);
    TestStream stream;
    device.poison_outputs();
    Problem device_problem = device.problem();
    device_problem.helix = {.cp_size = 2, .cp_rank = 1};
    run_backend_phases(*backend, device_problem, stream.get());
    device.download_outputs();
    expect_matches_reference(host, fmt::format("helix, no bounds, kv={}", to_string(kv)), device_problem.helix);
  }
}

SyntheticBatch long_request(std::int32_t heads, std::int32_t q_len, std::int32_t page, DType kv) {
  BatchSpec spec = generic_spec(heads, page, q_len, {20000}, kv);
  spec.seed = 2024 + heads;
  return SyntheticBatch(spec);
}

TEST(GenericSplitKv, OneLongRequestIsSplitAndCombined) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  SyntheticBatch host = long_request(16, 1, 64, DType::bf16);
  EXPECT_FALSE(cuda::plan_generic_work(host.problem(), cuda::device_sm_count(0)).segments.empty());
  expect_parity(host, "split H16 q1", 1);
}

// One NaN code in the KV of a request: NaN in every output and l, whether
// the plan splits it or not (the kernel stored a NaN l as an empty row's 0,
// and the combine dropped such a split from a finite answer).
TEST(GenericSplitKv, NanInTheKvReachesEveryOutputSplitOrNot) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  for (const auto& [kv_len, kv] : {std::pair{20000, DType::bf16}, std::pair{20000, DType::fp8_e4m3},
                                   std::pair{300, DType::bf16}}) {
    SyntheticBatch host(generic_spec(16, 64, 2, {kv_len}, kv));
    const bool split = !cuda::plan_generic_work(host.problem(), cuda::device_sm_count(0)).segments.empty();
    if (kv_len == 20000) EXPECT_TRUE(split) << "kv_len " << kv_len << " was not split";
    put_nan_in_kv(host, kv_len / 3);
    DeviceBatch device(host);
    poison_outputs_finite(device.problem(), host);
    TestStream stream;
    run_backend_phases(*cuda::make_generic_backend(), device.problem(), stream.get());
    device.download_outputs();
    expect_first_request_nan(host, "kv_len " + std::to_string(kv_len) + " " + std::string(to_string(kv)) +
                                       (split ? " split" : " unsplit"));
  }
}

TEST(GenericLongRequest, ManyHeadsFp8PageOfThree) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  SyntheticBatch host = long_request(128, 2, 3, DType::fp8_e4m3);
  EXPECT_FALSE(cuda::plan_generic_work(host.problem(), cuda::device_sm_count(0)).segments.empty());
  expect_parity(host, "split H128 q2 fp8 page3", 1);
}

// A prefix cache: requests list the same leading pages (the long ones
// likely split).
TEST(GenericPrefixCache, RequestsSharingLeadingPagesMatch) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  for (const auto& [heads, page, kv] : {std::tuple{16, 16, DType::bf16}, std::tuple{128, 64, DType::fp8_e4m3},
                                         std::tuple{48, 3, DType::fp16}}) {
    BatchSpec spec = generic_spec(heads, page, 2, {12000, 1500, 900, 12003}, kv);
    spec.shared_prefix_pages = 1200 / page;
    spec.seed = 91 + heads;
    SyntheticBatch host(spec);
    expect_parity(host, fmt::format("prefix cache H{} page{} {}", heads, page, to_string(kv)), 1);
  }
}

// Pages past 2^31 and 2^32 bytes into the pool, as in an engine's cache.
TEST(GenericLargePool, PagesPastFourGiBMatch) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  constexpr std::int64_t kFourGiB = std::int64_t{1} << 32;
  BatchSpec spec = generic_spec(24, 48, 2, {700, 90, 2000}, DType::fp16);
  grow_pool_past(spec, kFourGiB + kFourGiB / 16);
  SyntheticBatch host(spec);
  ASSERT_GT(rows_read_past(host, kFourGiB), 0);
  ASSERT_LT(rows_read_past(host, kFourGiB / 2), rows_read_past(host, 0));
  expect_parity(host, "pool past 4 GiB", 1);
}

TEST(GenericDims, NonDefaultLatentAndRopeWidths) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  struct Dims {
    std::int32_t rank, rope;
    DType kv;
  };
  for (const Dims& d : {Dims{256, 64, DType::fp8_e4m3}, Dims{80, 16, DType::bf16}, Dims{512, 0, DType::fp16}}) {
    BatchSpec spec = generic_spec(12, 16, 2, {201, 17, 999}, d.kv);
    spec.dims = {d.rank, d.rope};
    SyntheticBatch host(spec);
    expect_parity(host, fmt::format("dims {}+{}", d.rank, d.rope), 1);
  }
}

// Small shapes for compute-sanitizer (memcheck, racecheck): page size 1,
// odd heads and page sizes, verify groups up to 16 tokens, fp8, a split range.
TEST(GenericSanitize, SmallShapes) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  struct Small {
    std::int32_t heads, page, q_len;
    std::vector<std::int32_t> kv_len;
    DType kv;
  };
  for (const Small& s : {Small{3, 1, 4, {37, 5}, DType::bf16}, Small{48, 16, 1, {700}, DType::fp8_e4m3},
                         Small{5, 7, 2, {2, 333}, DType::fp16}, Small{2, 5, 16, {40, 16}, DType::fp8_e4m3}}) {
    SyntheticBatch host(generic_spec(s.heads, s.page, s.q_len, s.kv_len, s.kv));
    expect_parity(host, fmt::format("small H{} page{}", s.heads, s.page), 1);
  }
}

// ---------------------------------------------------------------- run API

TEST(GenericWorkspace, CallerWorkspaceWorksAndTooSmallIsRejected) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  BatchSpec spec;
  spec.heads = 16;
  spec.kv_len = {3000, 41};
  spec.generations = 2;
  spec.stats = true;
  SyntheticBatch host(spec);
  DeviceBatch device(host);
  const Problem problem = device.problem();
  validate(problem);
  const BackendPtr backend = cuda::make_generic_backend();
  const std::size_t bytes = backend->workspace_bytes(problem);
  ASSERT_GT(bytes, 0u);
  TestStream stream;
  DeviceBuffer too_small(bytes - 256);
  try {
    backend->prepare(problem, Workspace{too_small.data(), bytes - 256}, stream.get());
    ADD_FAILURE() << "a short workspace was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "workspace.bytes");
    EXPECT_NE(e.rule().find(std::to_string(bytes)), std::string::npos) << e.rule();
  }
  DeviceBuffer workspace(bytes);
  device.poison_outputs();
  auto run = backend->prepare(problem, Workspace{workspace.data(), bytes}, stream.get());
  run->enqueue(stream.get());
  stream.synchronize();
  device.download_outputs();
  expect_matches_reference(host, "caller workspace");
}

TEST(GenericGraphReplay, CapturedEnqueueReplaysTwice) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  BatchSpec spec;
  spec.heads = 16;
  spec.q_len = 2;
  spec.page_size = 16;
  spec.generations = 2;
  spec.kv_len = {5001, 77};
  spec.stats = true;
  SyntheticBatch host(spec);
  DeviceBatch device(host);
  const Problem problem = device.problem();
  validate(problem);
  ASSERT_FALSE(cuda::plan_generic_work(problem, cuda::device_sm_count(0)).segments.empty())
      << "the graph should hold the combine";
  const BackendPtr backend = cuda::make_generic_backend();
  TestStream stream;
  auto run = backend->prepare(problem, Workspace{}, stream.get());
  stream.synchronize();

  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  run->enqueue(stream.get());
  check_cuda(cudaStreamEndCapture(stream.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 0; replay < 2; ++replay) {
    device.poison_outputs();
    check_cuda(cudaGraphLaunch(exec, stream.get()));
    stream.synchronize();
    device.download_outputs();
    expect_matches_reference(host, "replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// ---------------------------------------------------------------- combine

// The float64 merge of one row's `splits` partials from entry `first`:
// splits with l = 0, and split `except`, take no part.
struct MergedRow {
  std::vector<double> out;
  double m = -INFINITY, l = 0.0;
};
MergedRow merge_row_float64(const std::vector<float>& partial, const std::vector<float>& stats, std::int64_t first,
                            std::int32_t splits, std::int32_t columns, std::int32_t except = -1) {
  MergedRow r;
  r.out.assign(static_cast<std::size_t>(columns), 0.0);
  auto takes_part = [&](std::int32_t s) { return s != except && stats[(first + s) * 2 + 1] > 0; };
  for (std::int32_t s = 0; s < splits; ++s) {
    if (takes_part(s)) r.m = std::max<double>(r.m, stats[(first + s) * 2]);
  }
  for (std::int32_t s = 0; s < splits; ++s) {
    if (takes_part(s)) r.l += stats[(first + s) * 2 + 1] * std::exp(stats[(first + s) * 2] - r.m);
  }
  for (std::int32_t s = 0; s < splits && r.l > 0; ++s) {
    if (!takes_part(s)) continue;
    const double w = stats[(first + s) * 2 + 1] * std::exp(stats[(first + s) * 2] - r.m) / r.l;
    for (std::int32_t d = 0; d < columns; ++d) r.out[d] += w * partial[(first + s) * columns + d];
  }
  if (!(r.l > 0)) r.m = -INFINITY;
  return r;
}

// The split combine over device segments and partials into fp16 `out` and
// `out_stats` (as filled before), both downloaded.
struct CombineOutput {
  std::vector<std::uint16_t> out;
  std::vector<float> stats;
};
CombineOutput run_split_combine(const DeviceBuffer& segments, std::int32_t num_segments, std::int64_t total_rows,
                                std::int64_t wide_rows, const DeviceBuffer& partial, const DeviceBuffer& stats,
                                std::int32_t columns, DeviceBuffer& out, DeviceBuffer& out_stats) {
  cuda::SplitCombineArgs args;
  args.segments = static_cast<const cuda::SplitSegment*>(segments.data());
  args.num_segments = num_segments;
  args.total_rows = total_rows;
  args.wide_rows = wide_rows;
  args.partial_out = static_cast<const float*>(partial.data());
  args.partial_stats = static_cast<const float*>(stats.data());
  args.kv_lora_rank = columns;
  args.out = out.data();
  args.out_dtype = DType::fp16;
  args.stats = static_cast<float*>(out_stats.data());
  TestStream stream;
  cuda::launch_split_combine(args, stream.get());
  stream.synchronize();
  CombineOutput result{std::vector<std::uint16_t>(out.bytes() / 2), std::vector<float>(out_stats.bytes() / sizeof(float))};
  out.download(result.out.data(), out.bytes());
  out_stats.download(result.stats.data(), out_stats.bytes());
  return result;
}

// The combine of segments with `columns` columns per row against a float64
// merge of the same partials.
void expect_combine_merges(const std::int32_t columns) {
  SCOPED_TRACE("kv_lora_rank " + std::to_string(columns));
  // Segment 0: 2 rows x 3 splits, split 1 of row 0 empty (its partial is
  // NaN and must not reach the output). Segment 1: 1 row x 2 splits, all
  // empty. Segment 2: 1 row x 600 splits (a long request split across the
  // GPU: more splits than threads in either kernel shape, 32 or 512), every
  // seventh empty.
  const std::vector<cuda::SplitSegment> segments = {{0, 0, 3, 2, 3}, {2, 6, 0, 1, 2}, {3, 8, 5, 1, 600}};
  const std::int64_t entries = 608;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> partial(entries * columns), stats(entries * 2);
  for (float& v : partial) v = uniform(rng);
  for (std::int64_t e = 0; e < entries; ++e) {
    stats[e * 2] = 3.0f * uniform(rng);
    stats[e * 2 + 1] = 1.0f + 5.0f * std::fabs(uniform(rng));
  }
  std::vector<std::int64_t> empty_entries = {1, 6, 7};
  for (std::int64_t e = 8; e < entries; e += 7) empty_entries.push_back(e);
  for (std::int64_t e : empty_entries) {
    stats[e * 2] = e == 1 ? 2.0f : -INFINITY;  // l == 0 marks an empty split whatever m says
    stats[e * 2 + 1] = 0.0f;
    std::fill(partial.begin() + e * columns, partial.begin() + (e + 1) * columns, NAN);
  }
  const std::int64_t out_rows = 6;
  std::vector<double> expected_out(out_rows * columns, 0.0), expected_stats(out_rows * 2, 0.0);
  for (const cuda::SplitSegment& seg : segments) {
    for (std::int32_t i = 0; i < seg.rows; ++i) {
      const std::int64_t row = seg.first_out_row + i;
      const MergedRow merged = merge_row_float64(
          partial, stats, seg.first_entry + static_cast<std::int64_t>(i) * seg.splits, seg.splits, columns);
      std::copy(merged.out.begin(), merged.out.end(), expected_out.begin() + row * columns);
      expected_stats[row * 2] = merged.m;
      expected_stats[row * 2 + 1] = merged.l;
    }
  }
  // Rows 1 and 2 of the output belong to no segment: they must keep their
  // poison (0xff bytes: NaN in fp16 and float32).
  DeviceBuffer d_segments(segments.size() * sizeof(cuda::SplitSegment));
  d_segments.upload(segments.data(), d_segments.bytes());
  DeviceBuffer d_partial(partial.size() * sizeof(float)), d_stats(stats.size() * sizeof(float));
  d_partial.upload(partial.data(), d_partial.bytes());
  d_stats.upload(stats.data(), d_stats.bytes());
  DeviceBuffer d_out(out_rows * columns * 2), d_out_stats(out_rows * 2 * sizeof(float));
  // The result may not depend on wide_rows, which only picks each row's
  // kernel shape: one warp per row slice, or sixteen taking every sixteenth
  // split. Every row narrow, every row wide, and the order
  // arrange_split_segments makes (the 600-split segment first, alone wide).
  std::vector<cuda::SplitSegment> arranged = segments;
  const std::int64_t arranged_wide = cuda::arrange_split_segments(arranged);
  ASSERT_EQ(arranged_wide, 1);
  ASSERT_EQ(arranged[0].splits, 600);
  ASSERT_EQ(arranged[1].first_partial_row, 1);
  ASSERT_EQ(arranged[2].first_partial_row, 3);
  DeviceBuffer d_arranged(arranged.size() * sizeof(cuda::SplitSegment));
  d_arranged.upload(arranged.data(), d_arranged.bytes());
  struct Order {
    const DeviceBuffer* segments;
    std::int64_t wide_rows;
  };
  for (const Order order : {Order{&d_segments, 0}, Order{&d_segments, 4}, Order{&d_arranged, arranged_wide}}) {
    SCOPED_TRACE("wide_rows " + std::to_string(order.wide_rows) +
                 (order.segments == &d_arranged ? " (arranged)" : ""));
    d_out.fill_bytes(0xff);
    d_out_stats.fill_bytes(0xff);

    const CombineOutput got =
        run_split_combine(*order.segments, 3, 4, order.wide_rows, d_partial, d_stats, columns, d_out, d_out_stats);
    const std::vector<std::uint16_t>& out = got.out;
    const std::vector<float>& out_stats = got.stats;

    for (std::int64_t row : {0, 3, 4, 5}) {
      std::vector<double> want(expected_out.begin() + row * columns, expected_out.begin() + (row + 1) * columns);
      const Comparison c = compare(out.data() + row * columns, DType::fp16, want);
      if (row == 0) {
        EXPECT_EQ(c.non_finite, 0) << "row 0 must be zeros";
        EXPECT_EQ(c.max_abs_err, 0.0) << "row 0 must be zeros";
      } else {
        EXPECT_TRUE(c.within(1e-3)) << "row " << row << ": " << c.rel_l2_err << ", non-finite " << c.non_finite;
      }
      if (row == 0) {
        EXPECT_EQ(out_stats[0], -INFINITY);
        EXPECT_EQ(out_stats[1], 0.0f);
      } else {
        EXPECT_NEAR(out_stats[row * 2], expected_stats[row * 2], 1e-5);
        EXPECT_NEAR(out_stats[row * 2 + 1], expected_stats[row * 2 + 1], 1e-4 * expected_stats[row * 2 + 1]);
      }
    }
    for (std::int64_t row : {1, 2}) {
      const bool out_kept = std::all_of(out.begin() + row * columns, out.begin() + (row + 1) * columns,
                                        [](std::uint16_t bits) { return bits == 0xffffu; });
      EXPECT_TRUE(out_kept) << "row " << row << " belongs to no segment, yet its output was written";
      EXPECT_TRUE(std::isnan(out_stats[row * 2]) && std::isnan(out_stats[row * 2 + 1]))
          << "row " << row << " belongs to no segment, yet its stats were written";
    }
  }
}

TEST(GenericSplitCombine, MergesSplitsAndIgnoresEmptyOnes) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  // 512: MLA's rank, one pass of float4 loads; 640: a second, partial pass;
  // 510: not a multiple of 4, column by column.
  for (const std::int32_t rank : {512, 640, 510}) expect_combine_merges(rank);
}

// A split whose statistics carry NaN input (NaN in the KV it read gives NaN
// l) turns its row to NaN, as the unsplit run would, instead of dropping out
// of a finite answer; a split with m = -inf and l > 0 (logits below
// float32's range) weighs nothing. Split 33 sits past the first 32 lanes.
TEST(GenericSplitCombine, PoisonedSplitsMakeTheirRowNan) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  constexpr std::int32_t kRows = 4, kSplits = 40, kColumns = 512;
  const std::vector<cuda::SplitSegment> segments = {{0, 0, 0, kRows, kSplits}};
  const std::int64_t entries = std::int64_t{kRows} * kSplits;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> partial(entries * kColumns), stats(entries * 2);
  for (float& v : partial) v = uniform(rng);
  for (std::int64_t e = 0; e < entries; ++e) {
    stats[e * 2] = 3.0f * uniform(rng);
    stats[e * 2 + 1] = 1.0f + 5.0f * std::fabs(uniform(rng));
  }
  auto set = [&](std::int32_t row, std::int32_t split, float m, float l) {
    stats[(std::int64_t{row} * kSplits + split) * 2] = m;
    stats[(std::int64_t{row} * kSplits + split) * 2 + 1] = l;
  };
  set(0, 7, 0.5f, NAN);
  set(1, 33, INFINITY, 2.0f);
  set(2, 3, NAN, 2.0f);
  // Row 3: the answer is the float64 merge of every split but 33.
  const MergedRow want = merge_row_float64(partial, stats, 3 * kSplits, kSplits, kColumns, 33);
  set(3, 33, -INFINITY, 5.0f);

  DeviceBuffer d_segments(segments.size() * sizeof(cuda::SplitSegment));
  d_segments.upload(segments.data(), d_segments.bytes());
  DeviceBuffer d_partial(partial.size() * sizeof(float)), d_stats(stats.size() * sizeof(float));
  d_partial.upload(partial.data(), d_partial.bytes());
  d_stats.upload(stats.data(), d_stats.bytes());
  DeviceBuffer d_out(kRows * kColumns * 2), d_out_stats(kRows * 2 * sizeof(float));
  for (const std::int64_t wide_rows : {std::int64_t{0}, std::int64_t{kRows}}) {
    SCOPED_TRACE("wide_rows " + std::to_string(wide_rows));
    d_out.fill_bytes(0x3c);  // finite poison: a row left unwritten cannot pass for NaN
    d_out_stats.fill_bytes(0x3c);
    const auto [out, out_stats] =
        run_split_combine(d_segments, 1, kRows, wide_rows, d_partial, d_stats, kColumns, d_out, d_out_stats);
    for (std::int32_t row = 0; row < 3; ++row) {
      const Comparison c = compare(out.data() + std::int64_t{row} * kColumns, DType::fp16,
                                   std::vector<double>(kColumns, 0.0));
      EXPECT_EQ(c.non_finite, kColumns) << "row " << row << " has finite outputs";
      EXPECT_TRUE(std::isnan(out_stats[row * 2 + 1])) << "row " << row << ": l " << out_stats[row * 2 + 1];
    }
    const Comparison c = compare(out.data() + 3 * kColumns, DType::fp16, want.out);
    EXPECT_TRUE(c.within(1e-3)) << "row 3: " << c.rel_l2_err << ", non-finite " << c.non_finite;
    EXPECT_NEAR(out_stats[6], want.m, 1e-5);
    EXPECT_NEAR(out_stats[7], want.l, 1e-4 * want.l);
  }
}

TEST(GenericSplitCombine, WideRowsBeyondTheRowsAreRefused) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  DeviceBuffer dummy(4096);
  cuda::SplitCombineArgs args;
  args.segments = static_cast<const cuda::SplitSegment*>(dummy.data());
  args.num_segments = 1;
  args.total_rows = 4;
  args.wide_rows = 5;
  args.out = dummy.data();
  try {
    cuda::launch_split_combine(args, nullptr);
    ADD_FAILURE() << "wide_rows 5 of 4 rows was launched";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("wide_rows"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace helixmla::testing

// The CPU reference against the naive float64 implementation. Both accumulate
// in float64, so outputs must agree to the output dtype's rounding and stats
// to float32 rounding: m itself, and l e^m (l is summed against the float32 m,
// the naive l against the float64 one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "helixmla/reference.hpp"
#include "helixmla/validate.hpp"
#include "naive_attention.hpp"
#include "parallel_naive_attention.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

// Largest relative rounding error of a value stored in `dtype` (half an ulp),
// with slack for the float step before it.
double output_rounding(DType dtype) {
  return (dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) * 1.001;
}

void expect_matches_naive(const Problem& p, const std::string& label) {
  ASSERT_NO_THROW(validate(p)) << label;
  reference_attention(p, 2);
  const testing::NaiveResult naive = testing::naive_attention(p);

  const double rounding = output_rounding(p.out_dtype);
  std::int64_t bad_out = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < naive.out.size(); ++i) {
    const double got = load_as_float(p.out, p.out_dtype, static_cast<std::int64_t>(i));
    const double want = naive.out[i];
    // The absolute term covers fp16 subnormals (step 2^-24).
    if (!(std::fabs(got - want) <= rounding * std::fabs(want) + 3e-8)) {
      if (bad_out++ == 0) first << "out[" << i << "] = " << got << ", naive " << want;
    }
  }
  EXPECT_EQ(bad_out, 0) << label << ": " << first.str();

  if (!p.stats.present()) return;
  std::int64_t bad_stats = 0;
  std::ostringstream first_stats;
  for (std::size_t row = 0; row < naive.stats.size() / 2; ++row) {
    const double m = p.stats.data[2 * row], l = p.stats.data[2 * row + 1];
    const double want_m = naive.stats[2 * row], want_l = naive.stats[2 * row + 1];
    const bool ok = std::isinf(want_m)
                        ? (std::isinf(m) && m < 0 && l == 0.0)
                        : (std::fabs(m - want_m) <= 1e-5 * std::fmax(1.0, std::fabs(want_m)) &&
                           std::fabs(l * std::exp(m - want_m) - want_l) <= 1e-5 * want_l);
    if (!ok && bad_stats++ == 0) {
      first_stats << "row " << row << ": (" << m << ", " << l << "), naive (" << want_m << ", "
                  << want_l << ")";
    }
  }
  EXPECT_EQ(bad_stats, 0) << label << ": " << first_stats.str();
}

using Case = std::tuple<DType, std::int32_t>;  // KV dtype, page size

class ReferenceVsNaive : public ::testing::TestWithParam<Case> {};

// Random small shapes, q_len 1..8, mixed batches with context rows (some of
// them chunks of prefill after a cached prefix) and non-unit KV scales.
TEST_P(ReferenceVsNaive, RandomSmallShapes) {
  const auto [kv_dtype, page_size] = GetParam();
  std::mt19937 rng(1000 + page_size * 7 + static_cast<int>(kv_dtype));
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  for (std::int32_t q_len = 1; q_len <= 8; ++q_len) {
    testing::BatchSpec spec;
    spec.dims = {64, 16};
    spec.heads = uniform(1, 6);
    spec.generations = uniform(1, 3);
    spec.q_len = q_len;
    spec.kv_len.clear();
    for (int g = 0; g < spec.generations; ++g) spec.kv_len.push_back(uniform(q_len, 300));
    spec.contexts = uniform(0, 2);
    spec.context_len = uniform(1, 40);
    spec.page_size = page_size;
    spec.kv_dtype = kv_dtype;
    spec.q_dtype = kv_dtype == DType::fp8_e4m3 && q_len % 2 == 0 ? DType::fp16
                                                                : testing::default_q_dtype(kv_dtype);
    spec.kv_scale = 0.04f;
    spec.stats = true;
    spec.seed = rng();
    testing::SyntheticBatch batch(spec);
    if (spec.contexts > 0 && spec.context_len > 1) {
      batch.q_len_[0] = uniform(1, spec.context_len);  // a prefill chunk after a cached prefix
    }
    Problem p = batch.problem();
    p.stats.tokens = p.num_tokens();
    if (kv_dtype != DType::fp8_e4m3 && q_len % 3 == 0) p.kv.scale = 0.75f;

    std::ostringstream label;
    label << to_string(kv_dtype) << " page " << page_size << " q_len " << q_len << " heads "
          << spec.heads << " contexts " << spec.contexts;
    expect_matches_naive(p, label.str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    KvDtypesAndPageSizes, ReferenceVsNaive,
    ::testing::Combine(::testing::Values(DType::bf16, DType::fp16, DType::fp8_e4m3),
                       ::testing::Values(1, 3, 16, 64, 128)),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_page" +
             std::to_string(std::get<1>(info.param));
    });

TEST(Reference, RealDimsBf16VerifyGroups) {
  testing::BatchSpec spec;  // kv_lora_rank 512, rope 64
  spec.heads = 16;
  spec.generations = 2;
  spec.q_len = 3;
  spec.kv_len = {300, 129};
  spec.page_size = 64;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  expect_matches_naive(batch.problem(), "512/64 bf16");
}

TEST(Reference, RealDimsFp8MixedBatch) {
  testing::BatchSpec spec;
  spec.heads = 8;
  spec.generations = 2;
  spec.q_len = 1;
  spec.kv_len = {257, 90};
  spec.contexts = 1;
  spec.context_len = 20;
  spec.page_size = 128;
  spec.kv_dtype = DType::fp8_e4m3;
  spec.kv_scale = 0.02f;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  expect_matches_naive(batch.problem(), "512/64 fp8");
}

// Scores near 1e5, where float32 keeps m to 2^-7: l must be summed against
// m as stored for l e^m to be the row's mass (the Helix combine's weight).
TEST(Reference, LargeScoresKeepTheStatsConsistent) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 3;
  spec.generations = 2;
  spec.q_len = 2;
  spec.kv_len = {41, 9};
  spec.page_size = 5;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  Problem p = batch.problem();
  p.softmax_scale = 3e4f;
  expect_matches_naive(p, "softmax_scale 3e4");
}

// Scores near 1e13, where float32's half ulp (~5e5) would overflow every
// weight taken against a rounded m: the output keeps the float64 maximum.
TEST(Reference, HugeScoresKeepTheOutputFinite) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 2;
  spec.generations = 2;
  spec.kv_len = {23, 6};
  spec.page_size = 4;
  testing::SyntheticBatch batch(spec);
  Problem p = batch.problem();
  p.softmax_scale = 2e12f;
  expect_matches_naive(p, "softmax_scale 2e12");
}

TEST(Reference, WithoutStatsWritesOutputsOnly) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 2;
  spec.q_len = 2;
  spec.kv_len = {37, 5};
  spec.page_size = 16;
  testing::SyntheticBatch batch(spec);
  expect_matches_naive(batch.problem(), "no stats");
}

// Helix bounds of 0 (and a rank that holds none of a request's KV): o = 0 and
// stats (-inf, 0), never NaN.
TEST(Reference, EmptyVisibilityRows) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 3;
  spec.generations = 3;
  spec.q_len = 2;
  spec.kv_len = {0, 40, 9};
  spec.page_size = 16;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  const std::vector<std::int32_t> bounds = {0, 0, 0, 17, 9, 9};
  Problem p = batch.problem();
  p.helix.cp_size = 2;
  p.helix.cp_rank = 1;
  p.helix.token_kv_bounds = bounds;
  expect_matches_naive(p, "empty visibility");

  const std::int64_t rank = p.dims.kv_lora_rank;
  for (std::int64_t token : {0, 1, 2}) {
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      const std::int64_t row = token * p.num_heads + h;
      for (std::int64_t c = 0; c < rank; ++c) {
        ASSERT_EQ(load_as_float(p.out, p.out_dtype, row * rank + c), 0.0f) << "token " << token;
      }
      EXPECT_EQ(p.stats.data[2 * row], -std::numeric_limits<float>::infinity());
      EXPECT_EQ(p.stats.data[2 * row + 1], 0.0f);
    }
  }
  // Token 3 sees 17 tokens: a real row.
  EXPECT_TRUE(std::isfinite(p.stats.data[2 * (3 * p.num_heads)]));
  EXPECT_GT(p.stats.data[2 * (3 * p.num_heads) + 1], 1.0f);
}

TEST(Reference, ThreadCountDoesNotChangeResults) {
  testing::BatchSpec spec;
  spec.dims = {128, 32};
  spec.heads = 5;
  spec.generations = 3;
  spec.q_len = 4;
  spec.kv_len = {100, 63, 250};
  spec.contexts = 1;
  spec.context_len = 30;
  spec.page_size = 16;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  const Problem p = batch.problem();
  reference_attention(p, 1);
  const std::vector<std::byte> single_out = batch.out_;
  const std::vector<float> single_stats = batch.stats_;
  for (int threads : {0, 3, 64}) {
    batch.poison_outputs();
    reference_attention(p, threads);
    EXPECT_EQ(std::memcmp(batch.out_.data(), single_out.data(), single_out.size()), 0) << threads;
    EXPECT_EQ(std::memcmp(batch.stats_.data(), single_stats.data(), single_stats.size() * sizeof(float)), 0)
        << threads;
  }
}

// The parallel form cuts each request into one-token sub-problems with its
// own reading of the mask; it must reproduce the plain form bit for bit, or
// every GPU test that trusts it would move with its mistakes.
TEST(NaiveAttention, ParallelFormMatchesThePlainOneExactly) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 11;  // not a multiple of the parallel form's head groups
  spec.generations = 3;
  spec.q_len = 3;
  spec.kv_len = {3, 40, 100};
  spec.contexts = 1;
  spec.context_len = 5;
  spec.page_size = 16;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  Problem p = batch.problem();
  std::mt19937 rng(77);
  std::vector<std::int32_t> bounds;
  for (std::int32_t r = 0; r < p.num_requests(); ++r) {
    for (std::int32_t t = 0; t < p.q_len[r]; ++t) {
      bounds.push_back(std::uniform_int_distribution<std::int32_t>(0, p.kv_len[r])(rng));
    }
  }
  for (const bool helix : {false, true}) {
    if (helix) {
      p.helix.cp_size = 2;
      p.helix.cp_rank = 1;
      p.helix.token_kv_bounds = bounds;
    }
    const testing::NaiveResult plain = testing::naive_attention(p);
    const testing::NaiveResult parallel = testing::parallel_naive_attention(p);
    ASSERT_EQ(parallel.out.size(), plain.out.size());
    ASSERT_EQ(parallel.stats.size(), plain.stats.size());
    std::size_t out_differs = 0, stats_differ = 0;
    for (std::size_t i = 0; i < plain.out.size(); ++i) out_differs += !(parallel.out[i] == plain.out[i]);
    for (std::size_t i = 0; i < plain.stats.size(); ++i) stats_differ += !(parallel.stats[i] == plain.stats[i]);
    EXPECT_EQ(out_differs, 0u) << (helix ? "with Helix bounds" : "causal mask");
    EXPECT_EQ(stats_differ, 0u) << (helix ? "with Helix bounds" : "causal mask");
  }
}

TEST(CpuBackend, DescribesItself) {
  const BackendPtr cpu = cpu::make_cpu_backend();
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->priority(), 10);
  EXPECT_TRUE(cpu->available(Environment{}).ok);
  const std::vector<KernelVariant> kernels = cpu->catalog().inventory(Environment{});
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].name, "reference_f64");
  EXPECT_TRUE(kernels[0].precompiled);
}

TEST(CpuBackend, AcceptsHostShapesAndRejectsDeviceTensors) {
  const BackendPtr cpu = cpu::make_cpu_backend();
  PhaseShape shape;
  shape.num_heads = 48;
  shape.page_size = 3;
  shape.helix = true;
  shape.cp_size = 4;
  shape.has_stats = true;
  shape.kv_dtype = DType::fp8_e4m3;
  KernelVariant chosen;
  EXPECT_TRUE(cpu->check(shape).ok);
  EXPECT_TRUE(cpu->catalog().can_implement(shape, Environment{}, &chosen).ok);
  EXPECT_EQ(chosen.name, "reference_f64");

  shape.on_device = true;
  const Verdict verdict = cpu->check(shape);
  EXPECT_FALSE(verdict.ok);
  EXPECT_NE(verdict.reason.find("host memory"), std::string::npos) << verdict.reason;
  EXPECT_FALSE(cpu->catalog().can_implement(shape, Environment{}).ok);
}

TEST(CpuBackend, PreparedRunComputesTheReference) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 4;
  spec.q_len = 2;
  spec.kv_len = {33, 70};
  spec.page_size = 16;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  const Problem p = batch.problem();
  const BackendPtr cpu = cpu::make_cpu_backend();
  EXPECT_EQ(cpu->workspace_bytes(p), 0u);
  auto run = cpu->prepare(p, Workspace{}, nullptr);
  // The caller may reuse its metadata once prepare returns, as for the
  // CUDA backends, which upload it.
  const std::vector<std::int32_t> kv_len = batch.kv_len_, page_table = batch.page_table_;
  std::fill(batch.kv_len_.begin(), batch.kv_len_.end(), 1);
  std::fill(batch.page_table_.begin(), batch.page_table_.end(), -1);
  batch.poison_outputs();
  run->enqueue(nullptr);  // synchronous: results are ready on return
  const std::vector<std::byte> backend_out = batch.out_;
  const std::vector<float> backend_stats = batch.stats_;
  batch.kv_len_ = kv_len;
  batch.page_table_ = page_table;
  batch.poison_outputs();
  reference_attention(p, 1);
  EXPECT_EQ(std::memcmp(batch.out_.data(), backend_out.data(), backend_out.size()), 0);
  EXPECT_EQ(std::memcmp(batch.stats_.data(), backend_stats.data(), backend_stats.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace helixmla

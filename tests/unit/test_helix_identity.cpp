// The Helix identity in miniature (DESIGN §5): attention over a whole sequence
// equals the log-sum-exp combination of attention over disjoint parts of its
// KV, each computed with its own page table, Helix bounds and statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "helixmla/reference.hpp"
#include "helixmla/validate.hpp"
#include "naive_attention.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

struct HelixCase {
  std::string name;
  std::int32_t parts = 2;
  bool round_robin = true;  // page b on part b % parts; otherwise contiguous runs
  std::int32_t kv_len = 100;
  std::int32_t q_len = 1;
  std::int32_t page_size = 16;
  DType kv_dtype = DType::bf16;
  MlaDims dims{64, 16};
  std::int32_t heads = 4;
  // Added to every score (approximately) so that m runs far from 0, where
  // float32 stats keep few of its fraction bits.
  double score_offset = 0.0;
};

void PrintTo(const HelixCase& c, std::ostream* os) { *os << c.name; }

// One rank's share of the sequence: its pages in order, its local KV length
// and, per query token, how many local tokens it sees.
struct Part {
  std::vector<std::int32_t> page_row;
  std::int32_t kv_len = 0;
  std::vector<std::int32_t> bounds;
  std::vector<std::byte> out;
  std::vector<float> stats;
  Problem problem;
};

std::int32_t owner(const HelixCase& c, std::int32_t page, std::int32_t pages) {
  return c.round_robin ? page % c.parts : static_cast<std::int32_t>(std::int64_t{page} * c.parts / pages);
}

// Parts of single tokens may leave their bounds out (`bounds` false): each
// token then sees its part's whole local KV, which the plain mask gives.
std::vector<Part> split(const HelixCase& c, const Problem& whole, bool bounds = true) {
  const std::int32_t P = c.page_size;
  const std::int32_t pages = (c.kv_len + P - 1) / P;
  auto tokens_in_page = [&](std::int32_t b) { return std::min(P, c.kv_len - b * P); };
  std::vector<Part> parts(static_cast<std::size_t>(c.parts));
  for (std::int32_t i = 0; i < c.parts; ++i) {
    Part& part = parts[i];
    std::vector<std::int32_t> global_pages;
    for (std::int32_t b = 0; b < pages; ++b) {
      if (owner(c, b, pages) != i) continue;
      global_pages.push_back(b);
      part.page_row.push_back(whole.page_table[b]);
      part.kv_len += tokens_in_page(b);
    }
    for (std::int32_t t = 0; t < c.q_len; ++t) {
      // Global positions [0, visible) are visible to token t; count the local ones.
      const std::int64_t visible = c.kv_len - c.q_len + 1 + t;
      std::int32_t bound = 0;
      for (std::int32_t b : global_pages) {
        bound += static_cast<std::int32_t>(std::clamp<std::int64_t>(visible - std::int64_t{b} * P, 0, tokens_in_page(b)));
      }
      part.bounds.push_back(bound);
    }
    const std::size_t used = part.page_row.size();
    if (used == 0) part.page_row.push_back(-1);  // engines keep a row even when it is empty

    const std::int64_t rows = std::int64_t{c.q_len} * c.heads;
    part.out.assign(static_cast<std::size_t>(rows * c.dims.kv_lora_rank) * dtype_size(whole.out_dtype),
                    std::byte{0xff});
    part.stats.assign(static_cast<std::size_t>(rows * 2), std::numeric_limits<float>::quiet_NaN());

    Problem& p = part.problem;
    p = whole;
    p.kv_len = std::span<const std::int32_t>(&part.kv_len, 1);
    p.page_table = part.page_row;
    p.page_table_stride = static_cast<std::int32_t>(part.page_row.size());
    p.out = part.out.data();
    p.stats.data = part.stats.data();
    p.helix.cp_size = c.parts;
    p.helix.cp_rank = i;
    if (bounds) p.helix.token_kv_bounds = part.bounds;
  }
  return parts;
}

// One request of the case's shape, with statistics.
testing::BatchSpec spec_of(const HelixCase& c) {
  testing::BatchSpec spec;
  spec.dims = c.dims;
  spec.heads = c.heads;
  spec.generations = 1;
  spec.q_len = c.q_len;
  spec.kv_len = {c.kv_len};
  spec.page_size = c.page_size;
  spec.kv_dtype = c.kv_dtype;
  spec.q_dtype = testing::default_q_dtype(c.kv_dtype);
  spec.stats = true;
  return spec;
}

// Raises every score of `batch`'s one request by about `offset`: the first
// value of each Q row becomes a power of two and each KV row's first value
// 1, leaving the scores' random spread on top of the offset.
void shift_scores(testing::SyntheticBatch& batch, double offset) {
  Problem p = batch.problem();
  const std::int64_t head_dim = p.dims.head_dim();
  const double k0 = p.kv.scale;
  const float q0 = std::exp2(std::round(std::log2(offset / (p.softmax_scale * k0))));
  for (std::int64_t row = 0; row < p.num_tokens() * p.num_heads; ++row) {
    store_from_float(batch.q_.data(), p.q_dtype, row * head_dim, q0);
  }
  for (std::int32_t position = 0; position < p.kv_len[0]; ++position) {
    store_from_float(batch.pool_.data(), p.kv.dtype, batch.pool_row(0, position), 1.0f);
  }
}

class HelixIdentity : public ::testing::TestWithParam<HelixCase> {};

TEST_P(HelixIdentity, CombinedPartsMatchTheWholeSequence) {
  const HelixCase& c = GetParam();
  testing::BatchSpec spec = spec_of(c);
  spec.kv_scale = 0.05f;
  spec.seed = 0x5eed + c.kv_len;
  testing::SyntheticBatch batch(spec);
  if (c.score_offset != 0.0) shift_scores(batch, c.score_offset);
  const Problem whole = batch.problem();
  ASSERT_NO_THROW(validate(whole));
  reference_attention(whole, 2);
  const testing::NaiveResult exact = testing::naive_attention(whole);

  // Single tokens run both ways: with their bounds and with the plain mask.
  for (const bool bounds : {true, false}) {
    if (!bounds && c.q_len != 1) continue;
    SCOPED_TRACE(bounds ? "with bounds" : "plain mask");
    std::vector<Part> parts = split(c, whole, bounds);
    for (Part& part : parts) {
      ASSERT_NO_THROW(validate(part.problem)) << "part " << part.problem.helix.cp_rank;
      reference_attention(part.problem, 2);
    }

    const std::int64_t rank = c.dims.kv_lora_rank;
    const double rounding = (whole.out_dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) * 1.001;
    std::int64_t bad = 0;
    std::string first;
    for (std::int64_t row = 0; row < std::int64_t{c.q_len} * c.heads; ++row) {
      // DESIGN §5: M = max_i m_i, w_i = l_i e^(m_i - M) / sum_j l_j e^(m_j - M),
      // o = sum_i w_i o_i.
      double M = -std::numeric_limits<double>::infinity();
      for (const Part& part : parts) M = std::max(M, static_cast<double>(part.stats[2 * row]));
      std::vector<double> w;
      double total = 0.0;
      for (const Part& part : parts) {
        const double m = part.stats[2 * row], l = part.stats[2 * row + 1];
        w.push_back(l == 0.0 ? 0.0 : l * std::exp(m - M));
        total += w.back();
      }
      for (double& wi : w) wi /= total;

      EXPECT_EQ(static_cast<float>(M), whole.stats.data[2 * row]) << "row " << row;
      EXPECT_NEAR(total, whole.stats.data[2 * row + 1], 1e-5 * total) << "row " << row;

      for (std::int64_t d = 0; d < rank; ++d) {
        double o = 0.0, magnitude = 0.0;
        for (std::size_t i = 0; i < parts.size(); ++i) {
          const double oi = load_as_float(parts[i].out.data(), whole.out_dtype, row * rank + d);
          ASSERT_TRUE(std::isfinite(oi)) << "part " << i << " row " << row << " left unwritten";
          o += w[i] * oi;
          magnitude += w[i] * std::fabs(oi);
        }
        const double want = exact.out[row * rank + d];
        // Each part's output was rounded to the output dtype before combining.
        if (!(std::fabs(o - want) <= rounding * magnitude + 3e-8)) {
          if (bad++ == 0) first = "row " + std::to_string(row) + " dim " + std::to_string(d) + ": " +
                                  std::to_string(o) + " vs " + std::to_string(want);
        }
        // The whole-sequence reference itself agrees at its own rounding.
        const double whole_o = load_as_float(whole.out, whole.out_dtype, row * rank + d);
        EXPECT_LE(std::fabs(whole_o - want), rounding * std::fabs(want) + 3e-8);
      }
    }
    EXPECT_EQ(bad, 0) << first;
  }
}

// A part whose bounds are all zero adds nothing: its statistics are (-inf, 0).
TEST_P(HelixIdentity, EmptyPartsReportNoMass) {
  const HelixCase& c = GetParam();
  testing::BatchSpec spec = spec_of(c);
  testing::SyntheticBatch batch(spec);
  std::vector<Part> parts = split(c, batch.problem());
  for (Part& part : parts) {
    reference_attention(part.problem, 1);
    for (std::int32_t t = 0; t < c.q_len; ++t) {
      if (part.bounds[t] != 0) continue;
      for (std::int32_t h = 0; h < c.heads; ++h) {
        const std::int64_t row = std::int64_t{t} * c.heads + h;
        EXPECT_EQ(part.stats[2 * row], -std::numeric_limits<float>::infinity());
        EXPECT_EQ(part.stats[2 * row + 1], 0.0f);
        EXPECT_EQ(load_as_float(part.out.data(), batch.problem().out_dtype, row * c.dims.kv_lora_rank), 0.0f);
      }
    }
  }
}

std::vector<HelixCase> cases() {
  std::vector<HelixCase> all;
  auto add = [&](HelixCase c) { all.push_back(std::move(c)); };
  add({.name = "cp2_contiguous_decode", .parts = 2, .round_robin = false, .kv_len = 100, .q_len = 1});
  add({.name = "cp3_round_robin_verify_straddles_pages", .parts = 3, .kv_len = 98, .q_len = 4});
  add({.name = "cp3_round_robin_one_part_empty", .parts = 3, .kv_len = 100, .q_len = 3, .page_size = 64});
  add({.name = "cp3_round_robin_decode_one_part_empty", .parts = 3, .kv_len = 100, .q_len = 1, .page_size = 64});
  add({.name = "cp3_contiguous_one_part_empty", .parts = 3, .round_robin = false, .kv_len = 100, .q_len = 2,
       .page_size = 64});
  add({.name = "cp2_first_token_sees_nothing_locally", .parts = 2, .kv_len = 18, .q_len = 3});
  add({.name = "cp2_page1_fp16_verify", .parts = 2, .kv_len = 37, .q_len = 5, .page_size = 1,
       .kv_dtype = DType::fp16});
  add({.name = "cp3_fp8_page3", .parts = 3, .kv_len = 61, .q_len = 2, .page_size = 3,
       .kv_dtype = DType::fp8_e4m3});
  add({.name = "cp2_real_dims_fp16", .parts = 2, .kv_len = 300, .q_len = 2, .page_size = 64,
       .kv_dtype = DType::fp16, .dims = {512, 64}, .heads = 8});
  // m near 2^22, whose float32 ulp is 0.5: the parts' l must be taken against
  // m as stored, or each weight l e^m is off by up to e^0.25.
  add({.name = "cp3_scores_near_4e6", .parts = 3, .kv_len = 90, .q_len = 2, .page_size = 8,
       .score_offset = 4e6});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Splits, HelixIdentity, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<HelixCase>& info) { return info.param.name; });

// The split itself: bounds are prefixes of local KV and add up to the whole.
TEST(HelixSplit, BoundsPartitionTheVisiblePositions) {
  const HelixCase c{.name = "check", .parts = 3, .kv_len = 98, .q_len = 4};
  testing::BatchSpec spec;
  spec.dims = c.dims;
  spec.heads = 1;
  spec.generations = 1;
  spec.q_len = c.q_len;
  spec.kv_len = {c.kv_len};
  spec.page_size = c.page_size;
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const std::vector<Part> parts = split(c, batch.problem());
  std::int32_t local_total = 0;
  for (const Part& part : parts) local_total += part.kv_len;
  EXPECT_EQ(local_total, c.kv_len);
  for (std::int32_t t = 0; t < c.q_len; ++t) {
    std::int32_t seen = 0;
    for (const Part& part : parts) seen += part.bounds[t];
    EXPECT_EQ(seen, visible_kv(c.kv_len, c.q_len, t));
  }
  // Positions 94..97 straddle pages 5 (part 2) and 6 (part 0).
  EXPECT_EQ(parts[2].bounds[1], parts[2].bounds[0] + 1);
  EXPECT_EQ(parts[0].bounds[2], parts[0].bounds[1] + 1);
}

}  // namespace
}  // namespace helixmla

#include "support/helix_step.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>

#include "compare.hpp"

namespace helixmla::testing {

namespace {

// Apart from expect_helix_step_matches so that ASSERT_NEAR can end it early.
void expect_stats_match(const std::vector<float>& stats, const std::vector<double>& expected, const std::string& label,
                        double tolerance) {
  for (std::size_t row = 0; row < expected.size() / 2; ++row) {
    const double m = expected[2 * row], l = expected[2 * row + 1];
    ASSERT_NEAR(stats[2 * row], m, tolerance * (1.0 + std::fabs(m))) << label << " row " << row;
    ASSERT_NEAR(stats[2 * row + 1], l, tolerance * l) << label << " row " << row;
  }
}

}  // namespace

void PrintTo(const HelixStepCase& c, std::ostream* os) { *os << c.name; }

BatchSpec batch_spec_of(const HelixStepCase& c, std::uint64_t seed) {
  BatchSpec spec;
  spec.dims = c.dims;
  spec.heads = c.heads;
  spec.generations = c.generations;
  spec.q_len = c.q_len;
  spec.kv_len = c.kv_len;
  spec.contexts = c.contexts;
  spec.context_len = c.context_len;
  spec.page_size = c.page_size;
  spec.use_kv_dtype(c.kv_dtype);
  spec.seed = seed;
  return spec;
}

void expect_fetched_step_matches(const dist::HelixDriver& driver, SyntheticBatch& batch, const NaiveResult& expected,
                                 const std::string& label, const HelixStepTolerance& tolerance) {
  const Problem global = batch.problem();
  std::vector<std::byte> out(batch.out_bytes(), std::byte{0xff});  // NaN in bf16 and fp16
  std::vector<float> stats(static_cast<std::size_t>(batch.num_tokens() * global.num_heads * 2),
                           std::numeric_limits<float>::quiet_NaN());
  driver.fetch_output(out.data(), stats.data());
  const Comparison error = compare(out.data(), global.out_dtype, expected.out);
  EXPECT_TRUE(error.within(tolerance.out_rel_l2))
      << label << " on " << driver.backends() << ": rel L2 " << error.rel_l2_err << ", max abs " << error.max_abs_err
      << ", non-finite " << error.non_finite;
  expect_stats_match(stats, expected.stats, label, tolerance.stats);
}

HelixStepResult expect_helix_step_matches(dist::HelixDriver& driver, SyntheticBatch& batch, const std::string& label,
                                          const HelixStepTolerance& tolerance) {
  HelixStepResult result;
  driver.poison_outputs();
  result.times = driver.step();
  result.expected = naive_attention(batch.problem());
  expect_fetched_step_matches(driver, batch, result.expected, label, tolerance);
  return result;
}

}  // namespace helixmla::testing

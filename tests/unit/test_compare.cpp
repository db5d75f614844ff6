// The statistics check every parity test relies on: a correct (m, l) whose m
// is the float32 rounding of the reference's passes at any magnitude, and a
// wrong l, a wrong m or a NaN fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "compare.hpp"

namespace helixmla::testing {
namespace {

struct Rows {
  std::vector<double> reference;
  std::vector<float> candidate;
};

// Rows of reference (m, l) at scores around `magnitude`, and a candidate that
// stores m as float32 and l for that stored m, as a correct backend does.
Rows correct_rows(double magnitude, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> offset(-1.0, 1.0), sum(1.0, 500.0);
  Rows rows;
  for (int row = 0; row < 64; ++row) {
    const double m_ref = magnitude * (1.0 + 1e-3 * offset(rng)) + offset(rng);
    const double l_ref = sum(rng);
    const float m = static_cast<float>(m_ref);
    rows.reference.insert(rows.reference.end(), {m_ref, l_ref});
    rows.candidate.insert(rows.candidate.end(), {m, static_cast<float>(l_ref * std::exp(m_ref - double{m}))});
  }
  return rows;
}

TEST(CompareStats, ACorrectLForAFloat32MPassesAtLargeScores) {
  for (const double magnitude : {0.0, 1e2, 3e4, 1e6}) {
    const Rows rows = correct_rows(magnitude, 11);
    const StatsComparison c = compare_stats(rows.candidate, rows.reference);
    EXPECT_TRUE(c.within(1e-5)) << "scores ~" << magnitude << ": m err " << c.max_m_err << ", l err "
                                << c.max_l_rel_err;
  }
}

TEST(CompareStats, AWrongLOrMOrANanFails) {
  const Rows good = correct_rows(3e4, 12);
  Rows wrong_l = good;
  wrong_l.candidate[2 * 5 + 1] *= 1.01f;
  EXPECT_FALSE(compare_stats(wrong_l.candidate, wrong_l.reference).within(1e-3));

  // m moved with l kept: l e^m, the combine's weight, is off by e^0.5.
  Rows wrong_m = good;
  wrong_m.reference.assign(wrong_m.reference.size(), 0.0);
  wrong_m.candidate.assign(wrong_m.candidate.size(), 0.0f);
  for (std::size_t row = 0; 2 * row < wrong_m.reference.size(); ++row) {
    wrong_m.reference[2 * row + 1] = wrong_m.candidate[2 * row + 1] = 3.0f;
  }
  wrong_m.candidate[2 * 7] = 0.5f;
  const StatsComparison moved = compare_stats(wrong_m.candidate, wrong_m.reference);
  EXPECT_FALSE(moved.within(1e-3)) << "m err " << moved.max_m_err << ", l err " << moved.max_l_rel_err;

  Rows nan = good;
  nan.candidate[2 * 3 + 1] = std::nanf("");
  EXPECT_EQ(compare_stats(nan.candidate, nan.reference).non_finite, 1);
}

}  // namespace
}  // namespace helixmla::testing

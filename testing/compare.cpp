#include "compare.hpp"

#include <algorithm>
#include <cmath>

namespace helixmla::testing {

namespace {
template <typename Load>
Comparison compare_with(Load load, const std::vector<double>& reference, std::size_t begin, std::size_t end) {
  Comparison c;
  double diff2 = 0.0, ref2 = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    const double x = load(i);
    if (!std::isfinite(x)) {
      ++c.non_finite;
      continue;
    }
    const double d = x - reference[i];
    c.max_abs_err = std::max(c.max_abs_err, std::fabs(d));
    diff2 += d * d;
    ref2 += reference[i] * reference[i];
  }
  c.rel_l2_err = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return c;
}
}  // namespace

Comparison compare(const void* candidate, DType dtype, const std::vector<double>& reference, std::size_t begin,
                   std::size_t end) {
  return compare_with(
      [&](std::size_t i) { return static_cast<double>(load_as_float(candidate, dtype, static_cast<std::int64_t>(i))); },
      reference, begin, end);
}

Comparison compare(const void* candidate, DType dtype, const std::vector<double>& reference) {
  return compare(candidate, dtype, reference, 0, reference.size());
}

Comparison compare(const std::vector<float>& candidate, const std::vector<double>& reference) {
  return compare_with([&](std::size_t i) { return static_cast<double>(candidate[i]); }, reference, 0,
                      reference.size());
}

StatsComparison compare_stats(const std::vector<float>& candidate, const std::vector<double>& reference) {
  StatsComparison c;
  for (std::size_t row = 0; 2 * row + 1 < reference.size(); ++row) {
    const double m = candidate[2 * row];
    const double l = candidate[2 * row + 1];
    const double m_ref = reference[2 * row];
    const double l_ref = reference[2 * row + 1];
    if (std::isnan(m) || std::isnan(l)) {
      ++c.non_finite;
      continue;
    }
    if (m_ref == -INFINITY) {
      if (!(m == -INFINITY && l == 0.0)) ++c.empty_mismatches;
      continue;
    }
    if (!std::isfinite(m) || !std::isfinite(l)) {
      ++c.non_finite;
      continue;
    }
    c.max_m_err = std::max(c.max_m_err, std::fabs(m - m_ref) / (1.0 + std::fabs(m_ref)));
    // l is a sum of e^(s - m) and m is stored as float32, so the reference's
    // l is taken at its m rounded alike: half an ulp of m (1e-3 at |m| ~
    // 2e4) would otherwise scale a correct l by as much. Not at the
    // candidate's own m: that would charge l with m's error, which the
    // fp8-steps engines' 14-bit scores make 2e-2 under a dominant token
    // (m err 2.3e-4 of |m|), and m has its own check.
    const double l_ref_at_stored_m = l_ref * std::exp(m_ref - static_cast<double>(static_cast<float>(m_ref)));
    c.max_l_rel_err = std::max(c.max_l_rel_err, std::fabs(l - l_ref_at_stored_m) / l_ref_at_stored_m);
  }
  return c;
}

}  // namespace helixmla::testing

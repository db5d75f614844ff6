#include "compare.hpp"

#include <cmath>

namespace helixmla::testing {

namespace {
template <typename Load>
Comparison compare_with(Load load, const std::vector<double>& reference) {
  Comparison c;
  double diff2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
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

Comparison compare(const void* candidate, DType dtype, const std::vector<double>& reference) {
  return compare_with(
      [&](std::size_t i) { return static_cast<double>(load_as_float(candidate, dtype, static_cast<std::int64_t>(i))); },
      reference);
}

Comparison compare(const std::vector<float>& candidate, const std::vector<double>& reference) {
  return compare_with([&](std::size_t i) { return static_cast<double>(candidate[i]); }, reference);
}

}  // namespace helixmla::testing

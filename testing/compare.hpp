// Error metrics between an output buffer and a float64 reference.
#pragma once

#include <cstdint>
#include <vector>

#include "helixmla/dtype.hpp"

namespace helixmla::testing {

struct Comparison {
  double max_abs_err = 0.0;
  double rel_l2_err = 0.0;
  std::int64_t non_finite = 0;  // NaN or inf in the candidate: never passes
  bool within(double rel_l2_tolerance) const {
    return non_finite == 0 && rel_l2_err <= rel_l2_tolerance;
  }
};

Comparison compare(const void* candidate, DType dtype, const std::vector<double>& reference);
Comparison compare(const std::vector<float>& candidate, const std::vector<double>& reference);

}  // namespace helixmla::testing

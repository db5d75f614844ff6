// Error metrics between an output buffer and a float64 reference.
#pragma once

#include <cstddef>
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

struct StatsComparison {
  std::int64_t empty_mismatches = 0;  // reference (-inf, 0) rows not reproduced exactly
  std::int64_t non_finite = 0;        // NaN anywhere, or inf where the reference is finite
  double max_m_err = 0.0;             // |m - m_ref| / (1 + |m_ref|)
  double max_l_rel_err = 0.0;         // |l - l_ref'| / l_ref', l_ref' = l_ref at float32(m_ref)
  bool within(double tolerance) const {
    return empty_mismatches == 0 && non_finite == 0 && max_m_err <= tolerance && max_l_rel_err <= tolerance;
  }
};

// `candidate` and `reference` are [rows, 2] = (m, l).
StatsComparison compare_stats(const std::vector<float>& candidate, const std::vector<double>& reference);

// Relative L2 error an output may have against the float64 reference (issue
// 4's parity bar): 1e-2 for 16-bit KV, 3e-2 for fp8 KV.
constexpr double output_tolerance(DType kv_dtype) { return kv_dtype == DType::fp8_e4m3 ? 3e-2 : 1e-2; }

// Error the statistics may have (m absolute, l relative) against the
// float64 reference in the GPU tests: 1e-3 for 16-bit KV; 1e-2 for fp8 KV,
// whose fp8-steps engines keep about 14 bits of S in the tensor cores'
// accumulator: on climbing scores (keys scaled up along the sequence) the
// 48-row engine's l is 3.6e-3 off with m within 4e-4, and the Helix
// combine, which weighs ranks by l e^m, moves by as much, a tenth of fp8's
// output tolerance.
constexpr double stats_tolerance(DType kv_dtype) { return kv_dtype == DType::fp8_e4m3 ? 1e-2 : 1e-3; }

Comparison compare(const void* candidate, DType dtype, const std::vector<double>& reference);
// Over reference values [begin, end) only (the candidate indexed alike).
Comparison compare(const void* candidate, DType dtype, const std::vector<double>& reference, std::size_t begin,
                   std::size_t end);
Comparison compare(const std::vector<float>& candidate, const std::vector<double>& reference);

}  // namespace helixmla::testing

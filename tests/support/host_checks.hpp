// Small host batches and their checks, for the tests of prepared runs
// (layers, step plans): a mixed batch, a runtime that sees no GPU, a run's
// outputs against the naive float64 attention, and whether outputs still
// hold their poison. GoogleTest assertions, hence here and not in testing/.
#pragma once

#include <cstdint>
#include <string>

#include "helixmla/runtime.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {

// Two contexts of 9 tokens and three verify groups of 2 over 40, 7 and 65
// tokens, 3 heads, narrow dims, 16-token pages, statistics on.
BatchSpec small_mixed_spec(DType kv_dtype = DType::bf16, std::uint64_t seed = 1);

// A Runtime that describes a machine without a GPU, so host batches run on
// the cpu backend whatever this machine has.
Runtime host_only_runtime();

// The batch's outputs within output_tolerance of the naive float64
// attention, and its statistics (when it has them) within 1e-5.
void expect_matches_naive(SyntheticBatch& batch, const std::string& label);

// Whether every output and statistic of the host batch still holds the
// poison of poison_outputs().
bool outputs_untouched(SyntheticBatch& batch);

}  // namespace helixmla::testing

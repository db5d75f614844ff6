// `helixmla sweep --execute`: on a GPU, run the cells the CUDA backends claim
// and compare each with the float64 reference. One representative per
// (backend, kernel variant, page-size class, KV dtype, q_len class, phase,
// Helix) combination, precompiled kernels first, within a time budget.
#pragma once

#include <vector>

#include "core/sweep.hpp"

namespace helixmla::tools {

// Returns 0 when every executed cell matched and every combination ran,
// 1 otherwise (a mismatch, an error, or combinations left for lack of time).
int execute_sweep(const std::vector<BackendPtr>& backends, SweepSpace space, double max_seconds, bool json);

}  // namespace helixmla::tools

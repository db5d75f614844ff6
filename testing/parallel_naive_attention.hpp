// testing::naive_attention's rows (one query token and a few heads a task)
// run on all cores, each request's KV decoded once for all of its tasks:
// fast enough to check GPU sweeps with the same plain float64 code, and one
// KV copy per running request, whatever its head count.
#pragma once

#include "naive_attention.hpp"

namespace helixmla::testing {

// Honors the verify-group mask and Helix bounds like naive_attention.
NaiveResult parallel_naive_attention(const Problem& host);

// How many threads it runs at most: each holds one request's decoded KV
// (float64) while it works on it, which is what the check costs in memory.
unsigned parallel_naive_threads();

// How tools name this reference in their output.
inline constexpr const char* kNaiveReferenceName = "naive float64";

}  // namespace helixmla::testing

// testing::naive_attention's rows (one query token and a few heads a task)
// run on all cores, each request's KV decoded once for all of its tasks:
// fast enough to check GPU sweeps with the same plain float64 code, and one
// KV copy per running request, whatever its head count.
#pragma once

#include "naive_attention.hpp"

namespace helixmla::testing {

// Honors the verify-group mask and Helix bounds like naive_attention.
NaiveResult parallel_naive_attention(const Problem& host);

}  // namespace helixmla::testing

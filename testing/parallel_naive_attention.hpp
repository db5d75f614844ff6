// testing::naive_attention cut into independent sub-problems (one query
// token and a few heads each) and run on all cores: fast enough to check GPU
// sweeps with the same plain float64 code.
#pragma once

#include "naive_attention.hpp"

namespace helixmla::testing {

// Honors the verify-group mask and Helix bounds like naive_attention.
NaiveResult parallel_naive_attention(const Problem& host);

}  // namespace helixmla::testing

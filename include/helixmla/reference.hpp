// The CPU reference: float64 accumulation, the masks of DESIGN §2 and Helix
// bounds, bit-exact KV decoding. Also what the CPU backend runs.
#pragma once

#include "helixmla/problem.hpp"

namespace helixmla {

// `problem` must be validated and live in host memory. Writes every output
// element (and stats when present). Rows with no visible KV get o = 0 and
// stats (-inf, 0). `threads` <= 0 means hardware concurrency.
void reference_attention(const Problem& problem, int threads = 0);

}  // namespace helixmla

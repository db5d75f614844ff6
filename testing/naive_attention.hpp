// A second, deliberately plain float64 implementation of DESIGN §2, written
// apart from the reference backend so the two can check each other. One
// request, one token, one head at a time; no threads, no shared helpers
// beyond the dtype decoders.
#pragma once

#include <vector>

#include "helixmla/problem.hpp"

namespace helixmla::testing {

struct NaiveResult {
  std::vector<double> out;    // [tokens, heads, kv_lora_rank]
  std::vector<double> stats;  // [tokens, heads, 2] = (m, l), natural log units
};

// Reads a host problem (its outputs are ignored).
NaiveResult naive_attention(const Problem& problem);

}  // namespace helixmla::testing

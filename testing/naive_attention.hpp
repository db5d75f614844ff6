// A second, deliberately plain float64 implementation of DESIGN §2, written
// apart from the reference backend so the two can check each other. One
// request, one token, one head at a time; no threads, no shared helpers
// beyond the dtype decoders.
#pragma once

#include <cstdint>
#include <vector>

#include "helixmla/problem.hpp"

namespace helixmla::testing {

struct NaiveResult {
  std::vector<double> out;    // [tokens, heads, kv_lora_rank]
  std::vector<double> stats;  // [tokens, heads, 2] = (m, l), natural log units
};

// Reads a host problem (its outputs are ignored).
NaiveResult naive_attention(const Problem& problem);

// How many KV positions query token t of `request` (packed token `token`)
// sees, by DESIGN §2 and the Helix bounds, clamped to [0, kv_len]: this
// file's own reading, not the library's, so that a wrong mask there cannot
// move the reference with it.
std::int64_t naive_visible_positions(const Problem& problem, std::int64_t request, std::int64_t t,
                                     std::int64_t token);

}  // namespace helixmla::testing

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

// naive_attention's two steps, for callers that schedule them (a request's
// rows are decoded once and read by all of its tokens and heads).
// The first `rows` KV rows of `request`, dequantised: [rows, head_dim].
std::vector<double> naive_request_kv(const Problem& problem, std::int64_t request, std::int64_t rows);
// Output row `row` (packed token x heads + head) over the first `visible`
// rows of its request's `kv`: out[kv_lora_rank] and stats[2] = (m, l).
void naive_attention_row(const Problem& problem, const std::vector<double>& kv, std::int64_t row,
                         std::int64_t visible, double* out, double* stats);

// How many KV positions query token t of `request` (packed token `token`)
// sees, by DESIGN §2 and the Helix bounds, clamped to [0, kv_len]: this
// file's own reading, not the library's, so that a wrong mask there cannot
// move the reference with it.
std::int64_t naive_visible_positions(const Problem& problem, std::int64_t request, std::int64_t t,
                                     std::int64_t token);

}  // namespace helixmla::testing

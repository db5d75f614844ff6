#include "naive_attention.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace helixmla::testing {

std::vector<double> naive_request_kv(const Problem& p, std::int64_t r, std::int64_t rows) {
  const std::int64_t head_dim = p.dims.head_dim();
  std::vector<double> kv(static_cast<std::size_t>(rows * head_dim));
  for (std::int64_t j = 0; j < rows; ++j) {
    const std::int64_t page = p.page_table[r * p.page_table_stride + j / p.kv.page_size];
    const std::int64_t slot = j % p.kv.page_size;
    for (std::int64_t c = 0; c < head_dim; ++c) {
      const std::int64_t index = (page * p.kv.page_size + slot) * head_dim + c;
      kv[j * head_dim + c] =
          static_cast<double>(load_as_float(p.kv.pool, p.kv.dtype, index)) * static_cast<double>(p.kv.scale);
    }
  }
  return kv;
}

std::int64_t naive_visible_positions(const Problem& p, std::int64_t request, std::int64_t t, std::int64_t token) {
  // DESIGN §2: token t of a group of q_len new tokens sees positions
  // [0, kv_len - q_len + 1 + t); Helix bounds replace that when given.
  const std::int64_t kv_len = p.kv_len[request];
  std::int64_t visible = kv_len - p.q_len[request] + 1 + t;
  if (!p.helix.token_kv_bounds.empty()) visible = p.helix.token_kv_bounds[token];
  if (visible < 0) visible = 0;
  if (visible > kv_len) visible = kv_len;
  return visible;
}

NaiveResult naive_attention(const Problem& p) {
  const std::int64_t heads = p.num_heads;
  const std::int64_t rank = p.dims.kv_lora_rank;
  const std::int64_t tokens = p.num_tokens();
  NaiveResult result;
  result.out.assign(static_cast<std::size_t>(tokens * heads * rank), 0.0);
  result.stats.assign(static_cast<std::size_t>(tokens * heads * 2), 0.0);

  std::int64_t token = 0;
  for (std::int64_t r = 0; r < p.num_requests(); ++r) {
    const std::vector<double> kv = naive_request_kv(p, r, p.kv_len[r]);
    for (std::int64_t t = 0; t < p.q_len[r]; ++t, ++token) {
      const std::int64_t visible = naive_visible_positions(p, r, t, token);
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t row = token * heads + h;
        naive_attention_row(p, kv, row, visible, &result.out[row * rank], &result.stats[row * 2]);
      }
    }
  }
  return result;
}

void naive_attention_row(const Problem& p, const std::vector<double>& kv, std::int64_t row, std::int64_t visible,
                         double* out, double* stats) {
  const std::int64_t head_dim = p.dims.head_dim();
  const std::int64_t rank = p.dims.kv_lora_rank;
  if (visible == 0) {
    stats[0] = -std::numeric_limits<double>::infinity();
    stats[1] = 0.0;
    return;
  }
  std::vector<double> q(static_cast<std::size_t>(head_dim));
  for (std::int64_t c = 0; c < head_dim; ++c) q[c] = load_as_float(p.q, p.q_dtype, row * head_dim + c);
  std::vector<double> logits(static_cast<std::size_t>(visible));
  for (std::int64_t j = 0; j < visible; ++j) {
    double dot = 0.0;
    for (std::int64_t c = 0; c < head_dim; ++c) dot += q[c] * kv[j * head_dim + c];
    logits[j] = static_cast<double>(p.softmax_scale) * dot;
  }
  double m = logits[0];
  for (double s : logits) m = std::fmax(m, s);
  double l = 0.0;
  for (double s : logits) l += std::exp(s - m);
  std::vector<double> probability(static_cast<std::size_t>(visible));
  for (std::int64_t j = 0; j < visible; ++j) probability[j] = std::exp(logits[j] - m) / l;
  for (std::int64_t j = 0; j < visible; ++j) {
    for (std::int64_t c = 0; c < rank; ++c) out[c] += probability[j] * kv[j * head_dim + c];
  }
  stats[0] = m;
  stats[1] = l;
}

}  // namespace helixmla::testing

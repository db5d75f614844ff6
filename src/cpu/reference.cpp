#include "helixmla/reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace helixmla {

namespace {

// A request's KV rows decoded once and shared by all its heads. Values are
// kept unscaled: every KV dtype decodes exactly into float, and kv.scale is
// applied in float64 to logits and outputs instead.
struct DecodedRequest {
  std::once_flag decode_once;
  std::vector<float> rows;  // [kv_len, head_dim]
  std::atomic<std::int32_t> heads_left{0};
};

class ReferenceRun {
 public:
  explicit ReferenceRun(const Problem& problem)
      : p_(problem),
        head_dim_(problem.dims.head_dim()),
        rank_(problem.dims.kv_lora_rank),
        requests_(problem.num_requests()),
        decoded_(std::make_unique<DecodedRequest[]>(static_cast<std::size_t>(requests_))) {
    first_token_.reserve(static_cast<std::size_t>(requests_));
    std::int64_t token = 0;
    for (std::int32_t r = 0; r < requests_; ++r) {
      first_token_.push_back(token);
      token += p_.q_len[r];
      decoded_[r].heads_left.store(p_.num_heads, std::memory_order_relaxed);
    }
  }

  std::int64_t items() const { return static_cast<std::int64_t>(requests_) * p_.num_heads; }

  // Items are taken in request-major order, so only about as many requests as
  // there are threads hold decoded rows at any time.
  void work(std::atomic<std::int64_t>& next) {
    Scratch scratch(head_dim_, rank_);
    for (std::int64_t item = next.fetch_add(1); item < items(); item = next.fetch_add(1)) {
      const std::int32_t r = static_cast<std::int32_t>(item / p_.num_heads);
      const std::int32_t h = static_cast<std::int32_t>(item % p_.num_heads);
      DecodedRequest& request = decoded_[r];
      std::call_once(request.decode_once, [&] { decode(r, request.rows); });
      for (std::int32_t t = 0; t < p_.q_len[r]; ++t) {
        attend(h, first_token_[r] + t, visible(r, t), request.rows, scratch);
      }
      if (request.heads_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::vector<float>().swap(request.rows);
      }
    }
  }

 private:
  struct Scratch {
    Scratch(std::int64_t head_dim, std::int64_t rank)
        : q(static_cast<std::size_t>(head_dim)), acc(static_cast<std::size_t>(rank)) {}
    std::vector<double> q, logits, acc;
  };

  std::int64_t visible(std::int32_t r, std::int32_t t) const {
    if (!p_.helix.token_kv_bounds.empty()) return p_.helix.token_kv_bounds[first_token_[r] + t];
    return visible_kv(p_.kv_len[r], p_.q_len[r], t);
  }

  void decode(std::int32_t r, std::vector<float>& rows) const {
    const std::int64_t kv_len = p_.kv_len[r];
    const std::int64_t page_size = p_.kv.page_size;
    rows.resize(static_cast<std::size_t>(kv_len * head_dim_));
    const std::int32_t* page_row = p_.page_table.data() + static_cast<std::int64_t>(r) * p_.page_table_stride;
    for (std::int64_t j = 0; j < kv_len; ++j) {
      const std::int64_t page = page_row[j / page_size];
      const std::int64_t source = (page * page_size + j % page_size) * head_dim_;
      float* row = rows.data() + j * head_dim_;
      for (std::int64_t c = 0; c < head_dim_; ++c) {
        row[c] = load_as_float(p_.kv.pool, p_.kv.dtype, source + c);
      }
    }
  }

  void attend(std::int32_t h, std::int64_t token, std::int64_t visible,
              const std::vector<float>& rows, Scratch& s) const {
    const std::int64_t row_index = token * p_.num_heads + h;
    float* stats = p_.stats.present() ? p_.stats.data + row_index * 2 : nullptr;
    const std::int64_t out_base = row_index * rank_;
    if (visible == 0) {
      for (std::int64_t c = 0; c < rank_; ++c) store_from_float(p_.out, p_.out_dtype, out_base + c, 0.0f);
      if (stats) {
        stats[0] = -std::numeric_limits<float>::infinity();
        stats[1] = 0.0f;
      }
      return;
    }
    const std::int64_t q_base = row_index * head_dim_;
    for (std::int64_t c = 0; c < head_dim_; ++c) s.q[c] = load_as_float(p_.q, p_.q_dtype, q_base + c);

    const double kv_scale = p_.kv.scale;
    const double logit_scale = static_cast<double>(p_.softmax_scale) * kv_scale;
    s.logits.resize(static_cast<std::size_t>(visible));
    double max_logit = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < visible; ++j) {
      const float* k = rows.data() + j * head_dim_;
      double dot = 0.0;
      for (std::int64_t c = 0; c < head_dim_; ++c) dot += s.q[c] * static_cast<double>(k[c]);
      s.logits[j] = dot * logit_scale;
      max_logit = std::max(max_logit, s.logits[j]);
    }
    std::fill(s.acc.begin(), s.acc.end(), 0.0);
    double sum = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) {
      const double weight = std::exp(s.logits[j] - max_logit);
      sum += weight;
      const float* v = rows.data() + j * head_dim_;
      for (std::int64_t c = 0; c < rank_; ++c) s.acc[c] += weight * static_cast<double>(v[c]);
    }
    const double normaliser = kv_scale / sum;
    for (std::int64_t c = 0; c < rank_; ++c) {
      store_from_float(p_.out, p_.out_dtype, out_base + c, static_cast<float>(s.acc[c] * normaliser));
    }
    if (stats) {
      // The stats are float32, and the combine weighs a rank by l e^m, so l
      // is taken against m as stored: against the float64 maximum, m's
      // rounding (half an ulp: 0.03 at |m| = 1e6) would go into every weight
      // unseen. The output keeps the float64 maximum, where no rounding of m
      // can overflow a weight. A maximum past float32's range has no float32
      // m: the stats hold an infinite m (unrepresentable, not hidden).
      const bool m_fits = std::fabs(max_logit) <= std::numeric_limits<float>::max();
      const float m = m_fits ? static_cast<float>(max_logit) : std::copysign(std::numeric_limits<float>::infinity(), max_logit);
      const double l = m_fits ? sum * std::exp(max_logit - static_cast<double>(m)) : sum;
      stats[0] = m;
      stats[1] = static_cast<float>(l);
    }
  }

  const Problem& p_;
  const std::int64_t head_dim_;
  const std::int64_t rank_;
  const std::int32_t requests_;
  std::vector<std::int64_t> first_token_;
  std::unique_ptr<DecodedRequest[]> decoded_;
};

}  // namespace

void reference_attention(const Problem& problem, int threads) {
  ReferenceRun run(problem);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::int64_t workers = std::min<std::int64_t>(threads, run.items());
  std::atomic<std::int64_t> next{0};
  if (workers <= 1) {
    run.work(next);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers));
  for (std::int64_t i = 0; i < workers; ++i) {
    pool.emplace_back([&] {
      try {
        run.work(next);
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next.store(run.items());  // stop the other workers early
      }
    });
  }
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace helixmla

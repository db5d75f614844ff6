// The batch model: one call's worth of MLA decode attention (DESIGN §2, §3).
//
// Tensors live where `location` says (host memory for the CPU backend, one
// CUDA device for GPU backends). Per-request metadata (lengths, page table,
// Helix bounds) is always host memory: validation, planning and selection read
// it without touching the device, and GPU backends upload what they need when
// a run is prepared, never inside the captured part.
#pragma once

#include <cstdint>
#include <span>

#include "helixmla/dtype.hpp"

namespace helixmla {

struct MlaDims {
  std::int32_t kv_lora_rank = 512;  // latent width: V and the first part of K
  std::int32_t rope_dim = 64;       // rotary part of K (and of Q)
  constexpr std::int32_t head_dim() const { return kv_lora_rank + rope_dim; }
  bool operator==(const MlaDims&) const = default;
};

struct Location {
  enum class Kind : std::uint8_t { host, cuda };
  Kind kind = Kind::host;
  int device = 0;
  static constexpr Location host() { return {}; }
  static constexpr Location cuda(int device) { return {Kind::cuda, device}; }
};

// Paged latent cache: `pool` is [num_pages, page_size, head_dim] of `dtype`.
// Rows past a request's kv_len, and pages no request lists, may hold any
// bits (NaN included): no backend lets them reach an output.
struct KvCache {
  const void* pool = nullptr;
  std::int64_t num_pages = 0;
  std::int32_t page_size = 0;
  DType dtype = DType::bf16;
  float scale = 1.0f;  // dequantisation scale: value = stored * scale (all dtypes)
};

// Optional softmax statistics output, float32 [tokens, heads, 2] = (m, l).
// The declared shape is validated against the batch so a mis-sized buffer is
// an error, not an overrun.
struct StatsBuffer {
  float* data = nullptr;
  DType dtype = DType::fp32;
  std::int64_t tokens = 0;
  std::int32_t heads = 0;
  std::int32_t width = 0;
  bool present() const { return data != nullptr; }
};

// Helix context parallelism as seen by one rank (DESIGN §5).
struct HelixSettings {
  std::int32_t cp_size = 1;
  std::int32_t cp_rank = 0;
  // Per packed query token: how many of the request's (local) KV tokens it
  // sees, a prefix. Empty means the ordinary masks of DESIGN §2. Under Helix
  // these replace the verify-group mask.
  std::span<const std::int32_t> token_kv_bounds;
  bool enabled() const { return cp_size > 1 || !token_kv_bounds.empty(); }
};

struct Problem {
  MlaDims dims;
  std::int32_t num_heads = 0;
  float softmax_scale = 0.0f;
  DType q_dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  Location location;

  const void* q = nullptr;  // [num_tokens, num_heads, head_dim]
  void* out = nullptr;      // [num_tokens, num_heads, kv_lora_rank]
  StatsBuffer stats;
  KvCache kv;

  // Requests: contexts first (num_contexts of them), then generations.
  std::int32_t num_contexts = 0;
  std::span<const std::int32_t> q_len;       // [num_requests] new tokens
  std::span<const std::int32_t> kv_len;      // [num_requests] KV incl. new tokens
  // [num_requests, page_table_stride]; slots past a request's last page are
  // never read (any value), and requests may share pages.
  std::span<const std::int32_t> page_table;
  std::int32_t page_table_stride = 0;

  HelixSettings helix;

  std::int32_t num_requests() const { return static_cast<std::int32_t>(q_len.size()); }
  std::int32_t num_generations() const { return num_requests() - num_contexts; }
  std::int64_t num_tokens() const {
    std::int64_t total = 0;
    for (std::int32_t s : q_len) total += s;
    return total;
  }
};

// What changes from one layer to the next of a decode step: the tensors and
// the KV dequantisation scale. Everything else of a Problem (lengths, page
// table, bounds, heads, dtypes, the pool's geometry) is the same in every
// layer, so one prepared run serves them all (PreparedRun::enqueue).
struct LayerTensors {
  const void* q = nullptr;  // [num_tokens, num_heads, head_dim] of q_dtype
  void* out = nullptr;      // [num_tokens, num_heads, kv_lora_rank] of out_dtype
  float* stats = nullptr;   // exactly when the run was prepared with statistics
  const void* kv_pool = nullptr;  // [num_pages, page_size, head_dim] of kv.dtype
  float kv_scale = 1.0f;
};

inline LayerTensors layer_tensors(const Problem& problem) {
  return {problem.q, problem.out, problem.stats.data, problem.kv.pool, problem.kv.scale};
}

inline Problem with_layer(Problem problem, const LayerTensors& layer) {
  problem.q = layer.q;
  problem.out = layer.out;
  problem.stats.data = layer.stats;
  problem.kv.pool = layer.kv_pool;
  problem.kv.scale = layer.kv_scale;
  return problem;
}

// KV positions visible to query token `t` (0-based within its request) of a
// request with `q_len` new tokens and `kv_len` cached tokens (DESIGN §2).
constexpr std::int64_t visible_kv(std::int64_t kv_len, std::int64_t q_len, std::int64_t t) {
  const std::int64_t n = kv_len - q_len + 1 + t;
  return n < 0 ? 0 : (n > kv_len ? kv_len : n);
}

}  // namespace helixmla

#include "helixmla/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "helixmla/error.hpp"

namespace helixmla {

namespace {

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

[[noreturn]] void reject(std::string field, std::int64_t index, std::string value, std::string rule) {
  throw InvalidArgument(std::move(field), index, std::move(value), std::move(rule));
}

std::string text(std::int64_t value) { return std::to_string(value); }
std::string text(std::int32_t value) { return std::to_string(value); }
std::string text(float value) { return fmt::format("{}", value); }
std::string text(DType dtype) { return std::string(to_string(dtype)); }
std::string text(const void* pointer) { return pointer ? "set" : "null"; }

std::int64_t pages_needed(std::int64_t kv_len, std::int64_t page_size) {
  return (kv_len + page_size - 1) / page_size;
}

// Whether every page id of `row[0, count)` lies in [0, pages). The baseline
// x86-64 build (SSE2) has no 32-bit vector min or max, and this scan ran at
// ~0.37 ns an entry: 390 us a step for a million-entry page table (page
// size 1, 64 x 16K tokens). An AVX2 clone, chosen at load time where the
// CPU has it, takes 60 us. The choice is an ifunc, which needs glibc.
#if defined(__x86_64__) && defined(__GLIBC__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target_clones("avx2", "default")))
#endif
bool pages_within(const std::int32_t* row, std::int64_t count, std::int64_t pages) {
  std::int32_t lowest = 0;
  std::int32_t highest = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    lowest = std::min(lowest, row[b]);
    highest = std::max(highest, row[b]);
  }
  return lowest >= 0 && highest < pages;
}

// Product of non-negative factors, or -1 when it does not fit int64.
std::int64_t checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (std::int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return -1;
  }
  return product;
}

bool is_half_type(DType dtype) { return dtype == DType::bf16 || dtype == DType::fp16; }

void validate_shape(const Problem& p) {
  if (p.q_len.empty()) {
    reject("q_len", -1, "[]", "empty batch: at least one request is needed");
  }
  if (static_cast<std::int64_t>(p.q_len.size()) > kInt32Max) {
    reject("q_len", -1, text(static_cast<std::int64_t>(p.q_len.size())),
           "more requests than fit int32");
  }
  if (p.num_heads < 1 || p.num_heads > kMaxHeads) {
    reject("num_heads", -1, text(p.num_heads), fmt::format("must be in 1..{}", kMaxHeads));
  }
  const std::int32_t rank = p.dims.kv_lora_rank;
  if (rank < 16 || rank > 2048 || rank % 16 != 0) {
    reject("dims.kv_lora_rank", -1, text(rank), "must be a multiple of 16 in [16, 2048]");
  }
  const std::int32_t rope = p.dims.rope_dim;
  if (rope < 0 || rope > 256 || rope % 16 != 0) {
    reject("dims.rope_dim", -1, text(rope), "must be a multiple of 16 in [0, 256]");
  }
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.0f) {
    reject("softmax_scale", -1, text(p.softmax_scale), "must be finite and > 0");
  }
  if (p.kv.page_size < 1) {
    reject("kv.page_size", -1, text(p.kv.page_size), "must be >= 1");
  }
  if (p.kv.num_pages < 1) {
    reject("kv.num_pages", -1, text(p.kv.num_pages), "the pool needs at least one page");
  }
}

void validate_dtypes(const Problem& p) {
  if (!is_half_type(p.q_dtype)) {
    reject("q_dtype", -1, text(p.q_dtype), "must be bf16 or fp16");
  }
  if (!is_half_type(p.out_dtype)) {
    reject("out_dtype", -1, text(p.out_dtype), "must be bf16 or fp16");
  }
  if (p.out_dtype != p.q_dtype) {
    reject("out_dtype", -1, text(p.out_dtype),
           fmt::format("must equal q_dtype ({})", to_string(p.q_dtype)));
  }
  if (!is_half_type(p.kv.dtype) && p.kv.dtype != DType::fp8_e4m3) {
    reject("kv.dtype", -1, text(p.kv.dtype), "must be bf16, fp16 or fp8");
  }
  if (is_half_type(p.kv.dtype) && p.kv.dtype != p.q_dtype) {
    reject("kv.dtype", -1, text(p.kv.dtype),
           fmt::format("unsupported combination: {} KV needs {} queries, got q_dtype {}",
                       to_string(p.kv.dtype), to_string(p.kv.dtype), to_string(p.q_dtype)));
  }
  if (!std::isfinite(p.kv.scale) || p.kv.scale <= 0.0f) {
    reject("kv.scale", -1, text(p.kv.scale), "must be finite and > 0");
  }
}

void validate_buffers(const Problem& p) {
  if (p.q == nullptr) reject("q", -1, text(p.q), "query tensor is missing");
  if (p.out == nullptr) reject("out", -1, text(p.out), "output tensor is missing");
  if (p.kv.pool == nullptr) reject("kv.pool", -1, text(p.kv.pool), "KV page pool is missing");
}

void validate_requests(const Problem& p) {
  const std::int64_t requests = static_cast<std::int64_t>(p.q_len.size());
  if (p.num_contexts < 0 || p.num_contexts > requests) {
    reject("num_contexts", -1, text(p.num_contexts),
           fmt::format("must be in [0, {}] (the number of requests)", requests));
  }
  if (p.kv_len.size() != p.q_len.size()) {
    reject("kv_len", -1, text(static_cast<std::int64_t>(p.kv_len.size())),
           fmt::format("has a different length than q_len ({})", requests));
  }
  for (std::int64_t r = 0; r < requests; ++r) {
    if (p.q_len[r] < 1) reject("q_len", r, text(p.q_len[r]), "each request needs >= 1 new token");
  }
  for (std::int64_t r = 0; r < requests; ++r) {
    if (p.kv_len[r] < 0) reject("kv_len", r, text(p.kv_len[r]), "must be >= 0");
  }
  for (std::int64_t r = p.num_contexts + 1; r < requests; ++r) {
    if (p.q_len[r] != p.q_len[p.num_contexts]) {
      reject("q_len", r, text(p.q_len[r]),
             fmt::format("generations must all have the same q_len (request {} has {})",
                         p.num_contexts, p.q_len[p.num_contexts]));
    }
  }
  // A Helix rank's local KV may be shorter than the query group, or empty
  // while the rank holds none of a request's pages yet; per-token bounds, or
  // for single tokens the plain mask (see validate_helix), cover it.
  if (!p.helix.enabled()) {
    for (std::int64_t r = 0; r < requests; ++r) {
      if (p.q_len[r] > p.kv_len[r]) {
        reject("q_len", r, text(p.q_len[r]),
               fmt::format("q_len > kv_len ({}): new tokens are part of the KV", p.kv_len[r]));
      }
    }
  }
  std::int64_t total_tokens = 0;
  for (std::int32_t s : p.q_len) total_tokens += s;
  // Kernels index tokens with int32. Query and output element counts then stay
  // below 2^31 * 128 heads * 2304 values, far inside int64.
  if (total_tokens > kInt32Max) {
    reject("q_len", -1, text(total_tokens), "total tokens (sum of q_len) must fit int32");
  }
}

void validate_page_table(const Problem& p) {
  const std::int64_t requests = static_cast<std::int64_t>(p.q_len.size());
  const std::int64_t stride = p.page_table_stride;
  const std::int64_t page_size = p.kv.page_size;
  if (stride < 0) reject("page_table_stride", -1, text(stride), "must be >= 0");
  if (static_cast<std::int64_t>(p.page_table.size()) != requests * stride) {
    reject("page_table", -1, text(static_cast<std::int64_t>(p.page_table.size())),
           fmt::format("must hold num_requests * page_table_stride = {} * {} = {} entries",
                       requests, stride, requests * stride));
  }
  for (std::int64_t r = 0; r < requests; ++r) {
    const std::int64_t needed = pages_needed(p.kv_len[r], page_size);
    if (needed > stride) {
      reject("kv_len", r, text(p.kv_len[r]),
             fmt::format("kv_len > pages * page_size: needs {} pages of {} but a page-table row "
                         "has {} (page_table_stride)",
                         needed, page_size, stride));
    }
  }
  // Only the pages a request uses are read; engines leave the rest of a row
  // unset (synthetic batches write stale ids there). Every step of an engine runs
  // this over the whole table (a million entries at page size 1), so a row
  // is checked by a branch-free reduction, and searched for its first bad
  // entry only when it has one.
  const auto out_of_pool = [&](std::int32_t page) { return page < 0 || page >= p.kv.num_pages; };
  for (std::int64_t r = 0; r < requests; ++r) {
    const std::int32_t* row = p.page_table.data() + r * stride;
    const std::int64_t needed = pages_needed(p.kv_len[r], page_size);
    if (pages_within(row, needed, p.kv.num_pages)) continue;
    for (std::int64_t b = 0; b < needed; ++b) {
      if (out_of_pool(row[b])) {
        reject("page_table", r * stride + b, text(row[b]),
               fmt::format("page id out of the pool [0, {}) (request {}, page {})", p.kv.num_pages, r, b));
      }
    }
  }
  if (stride * page_size > kInt32Max) {
    reject("page_table_stride", -1, text(stride),
           fmt::format("page_table_stride * page_size = {} must fit int32", stride * page_size));
  }
  const std::int64_t pool_bytes = checked_product(
      {p.kv.num_pages, page_size, p.dims.head_dim(), static_cast<std::int64_t>(dtype_size(p.kv.dtype))});
  if (pool_bytes < 0) {
    reject("kv.num_pages", -1, text(p.kv.num_pages),
           "num_pages * page_size * head_dim * dtype size overflows int64");
  }
}

void validate_stats(const Problem& p) {
  if (!p.stats.present()) return;
  if (p.stats.dtype != DType::fp32) {
    reject("stats.dtype", -1, text(p.stats.dtype), "softmax statistics are float32");
  }
  if (p.stats.tokens != p.num_tokens()) {
    reject("stats.tokens", -1, text(p.stats.tokens),
           fmt::format("must equal the number of query tokens ({})", p.num_tokens()));
  }
  if (p.stats.heads != p.num_heads) {
    reject("stats.heads", -1, text(p.stats.heads),
           fmt::format("must equal num_heads ({})", p.num_heads));
  }
  if (p.stats.width != 2) {
    reject("stats.width", -1, text(p.stats.width), "must be 2: (m, l) per token and head");
  }
}

void validate_helix(const Problem& p) {
  const HelixSettings& h = p.helix;
  if (h.cp_size < 1) reject("helix.cp_size", -1, text(h.cp_size), "must be >= 1");
  if (h.cp_rank < 0 || h.cp_rank >= h.cp_size) {
    reject("helix.cp_rank", -1, text(h.cp_rank), fmt::format("must be in [0, {})", h.cp_size));
  }
  const auto& bounds = h.token_kv_bounds;
  if (!bounds.empty()) {
    const std::int64_t tokens = p.num_tokens();
    if (static_cast<std::int64_t>(bounds.size()) != tokens) {
      reject("helix.token_kv_bounds", -1, text(static_cast<std::int64_t>(bounds.size())),
             fmt::format("needs one bound per query token ({})", tokens));
    }
    std::int64_t token = 0;
    for (std::size_t r = 0; r < p.q_len.size(); ++r) {
      for (std::int32_t t = 0; t < p.q_len[r]; ++t, ++token) {
        const std::int32_t bound = bounds[token];
        if (bound < 0 || bound > p.kv_len[r]) {
          reject("helix.token_kv_bounds", token, text(bound),
                 fmt::format("must be in [0, kv_len of request {} = {}]", r, p.kv_len[r]));
        }
        if (t > 0 && bound < bounds[token - 1]) {
          reject("helix.token_kv_bounds", token, text(bound),
                 fmt::format("must not decrease within request {} (previous token sees {})", r,
                             bounds[token - 1]));
        }
      }
    }
  }
  if (h.enabled() && !p.stats.present()) {
    reject("stats.data", -1, "null", "Helix needs softmax statistics to combine the ranks");
  }
  // Without bounds a rank would apply the verify-group mask to its local KV,
  // which is right only for single tokens: a group straddling a page
  // boundary sees different local prefixes per token (DESIGN §5).
  if (h.cp_size > 1 && bounds.empty()) {
    for (std::size_t r = 0; r < p.q_len.size(); ++r) {
      if (p.q_len[r] > 1) {
        reject("helix.token_kv_bounds", -1, "[]",
               fmt::format("a rank of cp_size {} needs per-token bounds when a request has q_len > 1 "
                           "(request {}: {}); helix_localize gives them",
                           h.cp_size, r, p.q_len[r]));
      }
    }
  }
}

}  // namespace

void validate_layer(const LayerTensors& layer, bool prepared_with_stats) {
  if (layer.q == nullptr) reject("layer.q", -1, text(layer.q), "query tensor is missing");
  if (layer.out == nullptr) reject("layer.out", -1, text(layer.out), "output tensor is missing");
  if (layer.kv_pool == nullptr) reject("layer.kv_pool", -1, text(layer.kv_pool), "KV page pool is missing");
  if (prepared_with_stats && layer.stats == nullptr) {
    reject("layer.stats", -1, "null", "the run was prepared with statistics: every layer needs a buffer");
  }
  if (!prepared_with_stats && layer.stats != nullptr) {
    reject("layer.stats", -1, "set", "the run was prepared without statistics: prepare one with them");
  }
  if (!std::isfinite(layer.kv_scale) || layer.kv_scale <= 0.0f) {
    reject("layer.kv_scale", -1, text(layer.kv_scale), "must be finite and > 0");
  }
}

void validate(const Problem& problem) {
  validate_shape(problem);
  validate_dtypes(problem);
  validate_buffers(problem);
  validate_requests(problem);
  validate_page_table(problem);
  validate_stats(problem);
  validate_helix(problem);
}

}  // namespace helixmla

// Helix context parallelism (DESIGN §5): which rank owns which KV pages and
// heads, what one rank's view of a batch is, the KV append that writes a
// step's new rows on their owning rank, and the exact log-sum-exp combine of
// the ranks' partial outputs.
//
// Conventions:
// - Page `b` of a sequence (positions [b*page_size, (b+1)*page_size)) lives on
//   rank `b % cp`. A rank's local KV of a request is its owned pages in
//   order, so local positions keep the order of global positions.
// - Every request is distributed this way, contexts included: a context is a
//   verify group whose q_len equals its kv_len, and the bounds express its
//   causal mask on each rank exactly as they do for generations.
// - Heads after the exchange: rank r owns heads [r*H/cp, (r+1)*H/cp)
//   (integer division), so H need not be divisible by cp; when H < cp some
//   ranks own no head.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "helixmla/dtype.hpp"
#include "helixmla/problem.hpp"

namespace helixmla {

struct HeadRange {
  std::int32_t begin = 0;
  std::int32_t count = 0;
  std::int32_t end() const { return begin + count; }
};

HeadRange helix_heads_of_rank(std::int32_t heads, std::int32_t cp, std::int32_t rank);

constexpr std::int32_t helix_page_owner(std::int64_t page, std::int32_t cp) {
  return static_cast<std::int32_t>(page % cp);
}

// How many of a sequence's first `tokens` positions live on `rank`.
std::int64_t helix_owned_tokens(std::int64_t tokens, std::int32_t page_size, std::int32_t cp,
                                std::int32_t rank);

// One request as one rank sees it.
struct HelixRequestView {
  std::int32_t kv_len = 0;                 // local KV tokens (0: holds nothing yet)
  std::vector<std::int32_t> page_row;      // owned pages, in order
  std::vector<std::int32_t> token_bounds;  // per new token: local KV it sees (a prefix)
};

// `kv_len` is the global length including this step's `q_len` new tokens,
// which are the last q_len positions; `global_row` the request's page-table
// row (at least ceil(kv_len / page_size) entries). The bound of the token at
// global position p is the number of local tokens at global positions <= p:
// the verify-group mask of DESIGN §2 mapped onto local KV.
HelixRequestView helix_localize_request(std::int32_t kv_len, std::int32_t q_len,
                                        std::span<const std::int32_t> global_row,
                                        std::int32_t page_size, std::int32_t cp,
                                        std::int32_t rank);

// A whole batch's metadata as one rank sees it. Owns its arrays so a local
// Problem's spans can point into it.
struct HelixLocalMetadata {
  std::int32_t cp_size = 1;
  std::int32_t cp_rank = 0;
  std::vector<std::int32_t> q_len;            // unchanged: every rank sees every query token
  std::vector<std::int32_t> kv_len;           // local
  std::vector<std::int32_t> page_table;       // [requests, page_table_stride], unused slots -1
  std::int32_t page_table_stride = 1;
  std::vector<std::int32_t> token_kv_bounds;  // per packed token of the batch
};

// `global` is an ordinary (non-Helix) batch; its page-table entries are page
// ids in the pool every rank addresses (in-process: one shared pool).
HelixLocalMetadata helix_localize(const Problem& global, std::int32_t cp, std::int32_t rank);

// `global` seen by one rank: same queries, pool and dtypes, the local
// metadata, and this rank's partial outputs: `partial_out` [tokens, H,
// kv_lora_rank] of global.out_dtype (normalised locally) and `partial_stats`
// float32 [tokens, H, 2]. Spans point into `local`, which must outlive it.
Problem helix_local_problem(const Problem& global, const HelixLocalMetadata& local,
                            void* partial_out, float* partial_stats);

// ---- KV append -------------------------------------------------------------

// Where a step's new rows go on `rank`: per packed token of the batch, the
// pool row (physical page * page_size + slot) of its global position, or -1
// when another rank owns that page. `page_table` holds global rows: entry b
// of a request is the physical page of its page b in this rank's pool;
// entries of pages other ranks own are never read.
std::vector<std::int64_t> helix_kv_append_rows(std::span<const std::int32_t> q_len,
                                               std::span<const std::int32_t> kv_len,
                                               std::span<const std::int32_t> page_table,
                                               std::int32_t page_table_stride,
                                               std::int32_t page_size, std::int64_t num_pages,
                                               std::int32_t cp, std::int32_t rank);

struct KvAppendArgs {
  void* pool = nullptr;  // [num_pages, page_size, row_width] of kv_dtype
  std::int64_t num_pages = 0;
  std::int32_t page_size = 0;
  std::int32_t row_width = 576;  // kv_lora_rank + rope_dim
  DType kv_dtype = DType::bf16;
  float kv_scale = 1.0f;         // stored = value / kv_scale (saturating for fp8)
  const void* new_rows = nullptr;  // [tokens, row_width] of new_dtype (bf16, fp16 or fp32)
  DType new_dtype = DType::bf16;
  std::int64_t tokens = 0;
  const std::int64_t* destinations = nullptr;  // [tokens] from helix_kv_append_rows
};

// Checks the arguments (not the destination values); throws InvalidArgument.
void check_kv_append_args(const KvAppendArgs& args);
// Host pool, host rows, host destinations (each checked against the pool:
// -1 or a pool row; anything else throws).
void kv_append_host(const KvAppendArgs& args);

// ---- Combine ---------------------------------------------------------------

// Exact merge of `cp` partial attentions of the same heads (DESIGN §5):
// M = max m_i, w_i = l_i e^(m_i - M) / sum_j l_j e^(m_j - M), o = sum w_i o_i,
// in float32. Partials with l = 0 (no visible KV) are skipped whatever their
// values, and so are those with m = -inf (logits below float32's range); a
// row where every partial is skipped gives o = 0 and stats (-inf, 0). A
// partial whose l is NaN or negative, or whose m is NaN or +inf (NaN in the
// KV it read, or logits past float32's range) makes its row's o and l NaN,
// as one unsplit run would, rather than vanish from a finite answer.
struct HelixCombineArgs {
  std::int32_t cp = 1;
  std::int64_t tokens = 0;
  std::int32_t heads = 0;    // heads being combined (this rank's)
  std::int32_t width = 512;  // kv_lora_rank
  const void* partial = nullptr;  // [cp, tokens, heads, width]
  DType partial_dtype = DType::fp32;  // fp32, bf16 or fp16
  const float* stats = nullptr;   // [cp, tokens, heads, 2] = (m, l)
  void* out = nullptr;            // [tokens, out_head_stride, width], heads [0, heads) written
  DType out_dtype = DType::bf16;  // bf16, fp16 or fp32
  std::int32_t out_head_stride = 0;  // 0: heads
  float* out_stats = nullptr;        // optional [tokens, out_stats_head_stride, 2] = (M, L)
  std::int32_t out_stats_head_stride = 0;  // 0: heads
};

// Checks the arguments; throws InvalidArgument naming the field.
void check_helix_combine_args(const HelixCombineArgs& args);
void helix_combine_host(const HelixCombineArgs& args);

#if defined(HELIXMLA_WITH_CUDA)
// Device twins: same semantics, every pointer in device memory of the
// current device; they only enqueue work on `stream` (a cudaStream_t), with
// no host synchronisation, and can be captured into a CUDA graph. The
// device destinations are not read on the host: one outside the pool is
// skipped (nothing written), where kv_append_host would throw.
void kv_append_device(const KvAppendArgs& args, void* stream);
void helix_combine_device(const HelixCombineArgs& args, void* stream);
#endif

}  // namespace helixmla

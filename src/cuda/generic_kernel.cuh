// Launch interface of the generic (SIMT) MLA decode kernel. Host code builds
// the work list (generic_work_plan.hpp) and fills GenericKernelParams; this
// header carries no device code so plain C++ files can include it.
//
// One thread block runs one work item: up to kGenericRowsPerBlock consecutive
// query rows (row = token * num_heads + head) of one request against one KV
// range of that request. The block streams the range in tiles of
// kGenericTileTokens tokens through shared memory (cp.async, double
// buffered, one page-table lookup per token), so each KV tile is read from
// global memory once per (request, split, row group), and keeps an online
// softmax in float32 per row.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "helixmla/dtype.hpp"

namespace helixmla::cuda {

inline constexpr int kGenericRowsPerBlock = 16;
inline constexpr int kGenericTileTokens = 32;
// Largest dims the kernel's register tiles hold: K = head_dim values, V the
// first kv_lora_rank of them, both multiples of 16.
inline constexpr int kGenericMaxHeadDim = 576;
inline constexpr int kGenericMaxRank = 512;

struct GenericWorkItem {
  std::int64_t out_row = 0;         // part-relative output row of the item's first row
  std::int64_t partial_entry = -1;  // < 0: write out and stats; else SplitSegment entry of
                                    // (first row, this split), rows `partial_stride` apart
  std::int32_t request = 0;         // part-relative
  std::int32_t rows = 0;            // 1..kGenericRowsPerBlock
  std::int32_t kv_begin = 0;        // KV range of this item, [kv_begin, kv_end)
  std::int32_t kv_end = 0;
  std::int32_t partial_stride = 0;  // splits of the item's segment
  std::int32_t unused = 0;
};

struct GenericKernelParams {
  const void* q = nullptr;    // [tokens, heads, head_dim], 4-byte aligned
  void* out = nullptr;        // [tokens, heads, kv_lora_rank] of q's dtype, 4-byte aligned
  float* stats = nullptr;     // [tokens, heads, 2] or null
  const void* pool = nullptr; // [pages, page_size, head_dim], 16-byte aligned
  std::int32_t page_size = 0;
  std::int32_t num_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t kv_lora_rank = 0;
  float score_scale = 0.0f;  // softmax_scale * kv.scale * log2(e): logits in base-2 units
  float value_scale = 0.0f;  // kv.scale
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;

  // Device copies of the prepared metadata.
  const GenericWorkItem* items = nullptr;
  std::int32_t num_items = 0;
  const std::int32_t* page_table = nullptr;  // [requests, page_table_stride]
  std::int32_t page_table_stride = 0;
  const std::int32_t* token_bounds = nullptr;  // [tokens] visible KV prefix of each token
  float* partial_out = nullptr;                // SplitSegment layout (split_combine.hpp)
  float* partial_stats = nullptr;
};

// Dynamic shared memory one block needs.
std::size_t generic_smem_bytes(DType kv_dtype, int head_dim);
// Host-side kernel configuration (shared-memory limit) for the current
// device; call outside graph capture, before the first launch.
void configure_generic_attention(DType q_dtype, DType kv_dtype);
// Enqueues one block per work item; only a launch, graph-capturable.
void launch_generic_attention(const GenericKernelParams& params, cudaStream_t stream);

}  // namespace helixmla::cuda

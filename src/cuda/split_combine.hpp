// Split-KV log-sum-exp combine, shared by the CUDA backends.
//
// A backend that splits the KV range of some query rows into several parts
// ("splits") writes, per (row, split), a partial output normalised by that
// split's own softmax sum plus the split's statistics, into a workspace. This
// kernel merges the splits of every such row exactly (DESIGN §5 formula):
//   M = max_s m_s,  w_s = l_s e^(m_s - M),  L = sum_s w_s,
//   o = sum_s w_s o_s / L,  stats = (M, L).
// Rows whose splits all saw nothing (every l_s == 0) get o = 0 and stats
// (-inf, 0), never NaN.
//
// Layout. Split rows are described by segments: a segment is `rows`
// consecutive output rows that share one split count. Entry (i, s) of a
// segment, 0 <= i < rows, 0 <= s < splits, is
//   entry = first_entry + i * splits + s
// and lives at partial_out[entry * kv_lora_rank ...] (float32, normalised)
// and partial_stats[entry * 2 ...] = (m, l) (float32, natural-log units,
// m = max scaled logit of the split, l = sum of e^(s - m)). An entry with
// l == 0 (or m == -inf) is ignored: its partial output is loaded (so the
// memory must exist) but never used, so a writer may leave it unwritten.
//
// Output row i of a segment is row `first_out_row + i` of `out`
// ([rows, kv_lora_rank] of out_dtype, i.e. [tokens, heads, kv_lora_rank]
// flattened) and of `stats` ([rows, 2] float32, optional).
//
// The launch only enqueues kernels (one per shape) on `stream`: no host
// synchronisation, no allocation, so it can be captured into a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "helixmla/dtype.hpp"

namespace helixmla::cuda {

struct SplitSegment {
  std::int64_t first_partial_row = 0;  // running count of split rows before this segment
  std::int64_t first_entry = 0;        // entry of (row 0, split 0)
  std::int64_t first_out_row = 0;      // output row of row 0
  std::int32_t rows = 0;
  std::int32_t splits = 0;
};

struct SplitCombineArgs {
  // Device memory, sorted by first_partial_row, segments tile
  // [0, total_rows) without gaps.
  const SplitSegment* segments = nullptr;
  std::int32_t num_segments = 0;
  std::int64_t total_rows = 0;  // sum of segments' rows
  // Rows [0, wide_rows) are merged a block per row slice, sixteen warps
  // sharing its splits; the rest a warp per row. Any value in [0,
  // total_rows] gives the same result; arrange_split_segments gives the
  // fast one.
  std::int64_t wide_rows = 0;

  const float* partial_out = nullptr;    // [entries, kv_lora_rank]
  const float* partial_stats = nullptr;  // [entries, 2]
  std::int32_t kv_lora_rank = 512;       // any positive value; fastest when a multiple of 4

  void* out = nullptr;                   // bf16 or fp16, 4-byte aligned
  DType out_dtype = DType::bf16;
  float* stats = nullptr;                // optional
};

// Whether two combines are the same launches once out and stats are bound
// alike (a refreshed run must keep its captured launches valid).
inline bool same_combine_launch(const SplitCombineArgs& a, const SplitCombineArgs& b) {
  return a.segments == b.segments && a.num_segments == b.num_segments && a.total_rows == b.total_rows &&
         a.wide_rows == b.wide_rows && a.partial_out == b.partial_out && a.partial_stats == b.partial_stats &&
         a.kv_lora_rank == b.kv_lora_rank && a.out_dtype == b.out_dtype;
}

// Segments of this many splits or more take the wide shape.
inline constexpr std::int32_t kSplitCombineWideFromSplits = 16;

// Puts the segments of many splits (a long request split across the GPU)
// first and renumbers every first_partial_row in the new order; returns
// their rows, SplitCombineArgs::wide_rows. Only first_partial_row changes:
// entries and output rows stay where the splits write them. A batch of
// one long request among many short ones has both kinds, and the wide
// shape for all of them took 512 threads for each 2-split row slice.
std::int64_t arrange_split_segments(std::span<SplitSegment> segments);

// Enqueues the combine for `args.total_rows` rows (nothing when 0). Throws
// InvalidArgument for an unsupported out_dtype and RuntimeFailure when the
// launch fails.
void launch_split_combine(const SplitCombineArgs& args, cudaStream_t stream);

}  // namespace helixmla::cuda

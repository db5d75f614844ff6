// A work item's rows: their KV bounds, split entries and statistics.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/params.cuh"

namespace helixmla_tc {

__device__ __forceinline__ int visible_kv(int kv_len, int q_len, int t) {
  const int n = kv_len - q_len + 1 + t;
  return n < 0 ? 0 : (n > kv_len ? kv_len : n);
}

// The KV bound of tile row `r` (relative to the item): its Helix bound or its
// causal one within the verify group, clamped to the item's range. Rows past
// the request's last get `padding`: they are never stored.
__device__ __forceinline__ int row_kv_bound(const Params& p, const WorkItem& w, int r, int rows_total, int padding) {
  if (w.row_begin + r >= rows_total) return padding;
  const int t = (w.row_begin + r) / p.heads;
  const int bound = p.token_bounds ? p.token_bounds[w.token_offset + t] : visible_kv(w.kv_len, w.q_len, t);
  return bound < w.kv_end ? bound : w.kv_end;
}

// split_combine's entry of tile row `r` in a split item.
__device__ __forceinline__ long long split_entry(const WorkItem& w, int r) {
  return static_cast<long long>(w.first_entry) + static_cast<long long>(r) * w.splits + w.split;
}

// Row `r`'s statistics (m in natural-log units, l): into stats for a whole
// item, into the split's partial entry otherwise.
__device__ __forceinline__ void store_row_stats(const Params& p, const WorkItem& w, long long row0, int r, float m,
                                                float l) {
  if (w.split < 0) {
    if (p.stats) *reinterpret_cast<float2*>(p.stats + (row0 + r) * 2) = make_float2(m, l);
  } else {
    *reinterpret_cast<float2*>(p.partial_stats + split_entry(w, r) * 2) = make_float2(m, l);
  }
}

}  // namespace helixmla_tc

// The exact log-sum-exp merge of one (token, head) row over cp partials
// (DESIGN §5, helixmla/helix.hpp), shared by the combine kernel and the peer
// exchange's fused combine so that both give the same bits. The block's
// threads split the columns; thread 0 writes the stats.
#pragma once

#include <cmath>

#include "cuda/helix_dtype.cuh"

namespace helixmla::cuda {

template <DType Partial>
struct PartialRow {
  const typename DeviceElement<Partial>::Storage* values;  // [width]
  const float* stats;                                     // (m, l)
};

__device__ __forceinline__ bool live_partial(const float* s) { return s[1] > 0.0f && isfinite(s[0]); }

// `source(i)` gives partial i's PartialRow. `out_stats` may be null.
template <DType Partial, DType Out, typename Source>
__device__ void helix_combine_row(int cp, int width, Source source,
                                  typename DeviceElement<Out>::Storage* out, float* out_stats) {
  float max_m = -INFINITY;
  for (int i = 0; i < cp; ++i) {
    const float* s = source(i).stats;
    if (live_partial(s)) max_m = fmaxf(max_m, s[0]);
  }
  float denominator = 0.0f;
  for (int i = 0; i < cp; ++i) {
    const float* s = source(i).stats;
    denominator += live_partial(s) ? s[1] * expf(s[0] - max_m) : 0.0f;
  }
  for (int k = threadIdx.x; k < width; k += blockDim.x) {
    float acc = 0.0f;
    if (denominator > 0.0f) {
      for (int i = 0; i < cp; ++i) {
        const PartialRow<Partial> p = source(i);
        if (!live_partial(p.stats)) continue;
        const float w = p.stats[1] * expf(p.stats[0] - max_m) / denominator;
        if (w == 0.0f) continue;
        acc += w * DeviceElement<Partial>::load(p.values, k);
      }
    }
    DeviceElement<Out>::store(out, k, acc);
  }
  if (out_stats != nullptr && threadIdx.x == 0) {
    out_stats[0] = denominator > 0.0f ? max_m : -INFINITY;
    out_stats[1] = denominator;
  }
}

}  // namespace helixmla::cuda

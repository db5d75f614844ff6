#include "cuda/split_combine.hpp"

#include <cmath>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/pair_codec.cuh"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

constexpr int kCombineThreads = 128;

__device__ int find_segment(const SplitSegment* segments, int count, std::int64_t row) {
  int lo = 0;
  int hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segments[mid].first_partial_row <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// One block per split row. Every thread derives the split weights itself
// (they are a few loads from L1), which keeps the kernel free of barriers.
template <typename Out>
__global__ void __launch_bounds__(kCombineThreads) split_combine_kernel(SplitCombineArgs args) {
  const std::int64_t row = blockIdx.x;
  const SplitSegment seg = args.segments[find_segment(args.segments, args.num_segments, row)];
  const std::int64_t i = row - seg.first_partial_row;
  const std::int64_t first = seg.first_entry + i * seg.splits;
  const float* stats = args.partial_stats + first * 2;

  float m_max = -INFINITY;
  for (int s = 0; s < seg.splits; ++s) {
    const float m = stats[2 * s];
    const float l = stats[2 * s + 1];
    if (l > 0.0f && m > -INFINITY) m_max = fmaxf(m_max, m);
  }
  float l_sum = 0.0f;
  if (m_max > -INFINITY) {
    for (int s = 0; s < seg.splits; ++s) {
      const float m = stats[2 * s];
      const float l = stats[2 * s + 1];
      if (l > 0.0f && m > -INFINITY) l_sum += l * __expf(m - m_max);
    }
  }
  const bool empty = !(l_sum > 0.0f);
  const float inv_sum = empty ? 0.0f : 1.0f / l_sum;

  const std::int64_t out_row = seg.first_out_row + i;
  const int rank = args.kv_lora_rank;
  Out* out = static_cast<Out*>(args.out) + out_row * rank;
  const float* partial = args.partial_out + first * rank;
  if (rank % 4 == 0) {
    for (int d = threadIdx.x * 4; d < rank; d += kCombineThreads * 4) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int s = 0; s < seg.splits && !empty; ++s) {
        const float m = stats[2 * s];
        const float l = stats[2 * s + 1];
        if (!(l > 0.0f && m > -INFINITY)) continue;
        const float w = l * __expf(m - m_max) * inv_sum;
        const float4 o = *reinterpret_cast<const float4*>(partial + std::int64_t{s} * rank + d);
        acc.x += w * o.x;
        acc.y += w * o.y;
        acc.z += w * o.z;
        acc.w += w * o.w;
      }
      PairCodec<Out>::store(out, d, acc.x, acc.y);
      PairCodec<Out>::store(out, d + 2, acc.z, acc.w);
    }
  } else {
    for (int d = threadIdx.x; d < rank; d += kCombineThreads) {
      float acc = 0.0f;
      for (int s = 0; s < seg.splits && !empty; ++s) {
        const float m = stats[2 * s];
        const float l = stats[2 * s + 1];
        if (!(l > 0.0f && m > -INFINITY)) continue;
        acc += l * __expf(m - m_max) * inv_sum * partial[std::int64_t{s} * rank + d];
      }
      out[d] = Out(acc);
    }
  }
  if (args.stats != nullptr && threadIdx.x == 0) {
    args.stats[out_row * 2] = empty ? -INFINITY : m_max;
    args.stats[out_row * 2 + 1] = empty ? 0.0f : l_sum;
  }
}

}  // namespace

void launch_split_combine(const SplitCombineArgs& args, cudaStream_t stream) {
  if (args.total_rows <= 0) return;
  if (args.num_segments <= 0) {
    throw InvalidArgument("num_segments", -1, std::to_string(args.num_segments),
                          "must be positive when total_rows > 0");
  }
  if (args.kv_lora_rank <= 0) {
    throw InvalidArgument("kv_lora_rank", -1, std::to_string(args.kv_lora_rank), "must be positive");
  }
  const dim3 grid(static_cast<unsigned>(args.total_rows));
  switch (args.out_dtype) {
    case DType::bf16:
      split_combine_kernel<__nv_bfloat16><<<grid, kCombineThreads, 0, stream>>>(args);
      break;
    case DType::fp16:
      split_combine_kernel<__half><<<grid, kCombineThreads, 0, stream>>>(args);
      break;
    default:
      throw InvalidArgument("out_dtype", -1, std::string(to_string(args.out_dtype)),
                            "split combine writes bf16 or fp16");
  }
  HELIXMLA_CUDA_CHECK_LAUNCH();
}

}  // namespace helixmla::cuda

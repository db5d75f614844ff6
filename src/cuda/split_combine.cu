#include "cuda/split_combine.hpp"

#include <cmath>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/pair_codec.cuh"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

// A block combines one row's splits for a slice of 128 columns (a float4 per
// lane) with LANES warps: warp w takes splits w, w + LANES, ... and the warps'
// sums meet in shared memory. Rows with a hundred splits (a few long requests
// split across the whole GPU) take 16 warps, so many loads are in flight
// instead of one chain of dependent iterations; rows with a few splits (many
// requests, the common case) take one warp, as 16 mostly idle warps per row
// made such combines several times slower.
constexpr int kColumnsPerBlock = 32 * 4;
constexpr int kWideLanes = 16;
constexpr int kWideFromSplits = 16;

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

__device__ bool contributes(float m, float l) { return l > 0.0f && m > -INFINITY; }

// Running softmax statistics of a set of splits: the largest m and the sum
// of l e^(m - max). Merging is order-free, so one pass over the splits'
// statistics yields both (two passes, max then sum, cost one more round
// trip to memory per block).
struct MaxSum {
  float m = -INFINITY;
  float l = 0.0f;
  __device__ void add(float m2, float l2) {
    if (!contributes(m2, l2)) return;
    if (m2 > m) {
      l = l * __expf(m - m2) + l2;  // e^(-inf) = 0 for the first contribution
      m = m2;
    } else {
      l += l2 * __expf(m2 - m);
    }
  }
};

// Merges one MaxSum per thread over the block; every thread gets the result.
template <int LANES>
__device__ MaxSum block_merge(MaxSum v, float2* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v.add(__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.l, offset));
  }
  if constexpr (LANES > 1) {
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = make_float2(v.m, v.l);
    __syncthreads();
    v = MaxSum{};
    for (int w = 0; w < LANES; ++w) v.add(scratch[w].x, scratch[w].y);
  }
  return v;
}

template <typename Out, int LANES>
__global__ void __launch_bounds__(32 * LANES) split_combine_kernel(SplitCombineArgs args) {
  // A kernel launched early after this one (a Helix exchange) may start its
  // prologue now; it still waits for this grid before reading the output.
  cuda::allow_next_grid();
  constexpr int kThreads = 32 * LANES;
  __shared__ float2 merge_s[LANES];
  __shared__ float4 lane_sums_s[LANES > 1 ? LANES - 1 : 1][32];
  const std::int64_t row = blockIdx.x;
  const SplitSegment seg = args.segments[find_segment(args.segments, args.num_segments, row)];
  const std::int64_t i = row - seg.first_partial_row;
  const std::int64_t first = seg.first_entry + i * seg.splits;
  const float2* stats = reinterpret_cast<const float2*>(args.partial_stats) + first;

  MaxSum total;
  for (int s = threadIdx.x; s < seg.splits; s += kThreads) total.add(stats[s].x, stats[s].y);
  total = block_merge<LANES>(total, merge_s);
  const float m_max = total.m;
  const bool empty = !(total.l > 0.0f);
  const float inv_sum = empty ? 0.0f : 1.0f / total.l;
  // A split's weight in the output; 0 for splits that saw nothing, whose
  // partials may be unwritten (any bits, NaN included) and never reach the
  // output. In the float4 path below they are loaded all the same: the
  // loads carry no branch, so a warp has a whole unrolled group of them in
  // flight instead of one stats-then-partial round trip per split.
  auto weight = [&](float2 ml) { return contributes(ml.x, ml.y) ? ml.y * __expf(ml.x - m_max) * inv_sum : 0.0f; };

  const std::int64_t out_row = seg.first_out_row + i;
  const int rank = args.kv_lora_rank;
  Out* out = static_cast<Out*>(args.out) + out_row * rank;
  const float* partial = args.partial_out + first * rank;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (rank % 4 == 0) {
    const int d = blockIdx.y * kColumnsPerBlock + lane * 4;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (d < rank && !empty) {
#pragma unroll 8
      for (int s = warp; s < seg.splits; s += LANES) {
        const float w = weight(stats[s]);
        const float4 o = *reinterpret_cast<const float4*>(partial + std::int64_t{s} * rank + d);
        if (w != 0.0f) {
          acc.x += w * o.x;
          acc.y += w * o.y;
          acc.z += w * o.z;
          acc.w += w * o.w;
        }
      }
    }
    if (warp > 0) lane_sums_s[warp - 1][lane] = acc;
    __syncthreads();
    if (warp == 0 && d < rank) {
      for (int w = 0; w < LANES - 1; ++w) {
        const float4 other = lane_sums_s[w][lane];
        acc.x += other.x;
        acc.y += other.y;
        acc.z += other.z;
        acc.w += other.w;
      }
      PairCodec<Out>::store(out, d, acc.x, acc.y);
      PairCodec<Out>::store(out, d + 2, acc.z, acc.w);
    }
  } else {
    for (int d = threadIdx.x; d < rank; d += kThreads) {
      float acc = 0.0f;
      for (int s = 0; s < seg.splits && !empty; ++s) {
        const float w = weight(stats[s]);
        if (w != 0.0f) acc += w * partial[std::int64_t{s} * rank + d];
      }
      out[d] = Out(acc);
    }
  }
  if (args.stats != nullptr && blockIdx.y == 0 && threadIdx.x == 0) {
    args.stats[out_row * 2] = empty ? -INFINITY : m_max;
    args.stats[out_row * 2 + 1] = empty ? 0.0f : total.l;
  }
}

template <typename Out>
void launch_for(const SplitCombineArgs& args, dim3 grid, cudaStream_t stream) {
  if (args.max_splits >= kWideFromSplits) {
    split_combine_kernel<Out, kWideLanes><<<grid, 32 * kWideLanes, 0, stream>>>(args);
  } else {
    split_combine_kernel<Out, 1><<<grid, 32, 0, stream>>>(args);
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
  const unsigned column_blocks =
      args.kv_lora_rank % 4 == 0 ? static_cast<unsigned>((args.kv_lora_rank + kColumnsPerBlock - 1) / kColumnsPerBlock)
                                 : 1u;
  const dim3 grid(static_cast<unsigned>(args.total_rows), column_blocks);
  switch (args.out_dtype) {
    case DType::bf16:
      launch_for<__nv_bfloat16>(args, grid, stream);
      break;
    case DType::fp16:
      launch_for<__half>(args, grid, stream);
      break;
    default:
      throw InvalidArgument("out_dtype", -1, std::string(to_string(args.out_dtype)),
                            "split combine writes bf16 or fp16");
  }
  HELIXMLA_CUDA_CHECK_LAUNCH();
}

}  // namespace helixmla::cuda

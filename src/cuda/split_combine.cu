#include "cuda/split_combine.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/partial_stats.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/kernel_launch.hpp"
#include "cuda/pair_codec.cuh"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

// Two shapes of kernel, by each segment's split count (rows ordered by
// arrange_split_segments, one launch per shape):
// - Rows with a few splits (many requests, the common case): a warp per
//   row over all its columns, eight rows to a block, each lane with four
//   float4 loads per split in flight. One single-warp block per (row, 128
//   columns) took 23 us for the 4096 two-split rows of suite case 3 (17
//   MB) on an H200: four times the segment lookups and stats loads, each
//   a dependent round trip, and blocks too small to hide them.
// - Rows with a hundred splits (a few long requests split across the whole
//   GPU): a block per (row, 128 columns) with 16 warps, warp w taking
//   splits w, w + 16, ..., whose sums meet in shared memory, so many loads
//   are in flight instead of one chain of dependent iterations.
constexpr int kRowsPerBlock = 8;
constexpr int kColumnsPerBlock = 32 * 4;
constexpr int kWideLanes = 16;

// The segment holding `row`, searched by a whole warp (every lane with the
// same row): each round the lanes probe 32 evenly spaced segments, so 128
// segments (suite case 11) take two dependent loads, not seven.
__device__ int find_segment(const SplitSegment* segments, int count, std::int64_t row) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int lo = 0;  // segments[lo].first_partial_row <= row throughout
  int hi = count - 1;
  while (lo < hi) {
    const int step = (hi - lo + 32) / 32;
    const int probe = lo + lane * step;
    const bool at_or_before = probe <= hi && segments[probe].first_partial_row <= row;
    const unsigned found = __ballot_sync(0xffffffffu, at_or_before);  // lane 0 (lo) always
    lo += (31 - __clz(found)) * step;
    hi = min(hi, lo + step - 1);
  }
  return lo;
}


// Running softmax statistics of a set of splits: the largest m and the sum
// of l e^(m - max). Merging is order-free, so one pass over the splits'
// statistics yields both (two passes, max then sum, cost one more round
// trip to memory per block).
struct MaxSum {
  float m = -INFINITY;
  float l = 0.0f;
  __device__ void add(float m2, float l2) {
    const PartialRole role = partial_role(m2, l2);
    if (role == PartialRole::poisons) l = NAN;  // stays NaN through every later add
    if (role != PartialRole::merged) return;
    if (m2 > m) {
      l = l * __expf(m - m2) + l2;  // e^(-inf) = 0 for the first contribution
      m = m2;
    } else {
      l += l2 * __expf(m2 - m);
    }
  }
};

// Merges one MaxSum per lane over the warp; every lane gets the result.
__device__ MaxSum warp_merge(MaxSum v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v.add(__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.l, offset));
  }
  return v;
}

// One output row's splits: where its entries start, their merged
// statistics, and each split's weight in the output (partial_role: 0 for
// splits that saw nothing, whose partials may be unwritten, any bits, NaN
// included, and never reach the output; NaN for every split of a row that
// one split's NaN statistics poisoned). Loads of those partials carry no branch, so a
// warp has a whole unrolled group of them in flight instead of one
// stats-then-partial round trip per split.
struct RowSplits {
  std::int64_t first = 0;  // entry of split 0
  std::int64_t out_row = 0;
  int splits = 0;
  const float2* stats = nullptr;
  MaxSum total;
  float inv_l = 0.0f;  // 1 / total.l, 0 for a row no split saw anything of

  __device__ RowSplits(const SplitCombineArgs& args, std::int64_t row) {
    const SplitSegment seg = args.segments[find_segment(args.segments, args.num_segments, row)];
    const std::int64_t i = row - seg.first_partial_row;
    first = seg.first_entry + i * seg.splits;
    out_row = seg.first_out_row + i;
    splits = seg.splits;
    stats = reinterpret_cast<const float2*>(args.partial_stats) + first;
  }
  __device__ void set_total(MaxSum merged) {
    total = merged;
    inv_l = empty() ? 0.0f : 1.0f / total.l;
  }
  // A row some split poisoned (l NaN) is not empty: its output is NaN.
  __device__ bool empty() const { return total.l == 0.0f; }
  // Weight in the output of a split with statistics ml.
  __device__ float weight_of(float2 ml) const {
    const PartialRole role = partial_role(ml.x, ml.y);
    return role == PartialRole::merged ? ml.y * __expf(ml.x - total.m) * inv_l
           : role == PartialRole::skipped ? 0.0f
                                          : NAN;
  }
  __device__ float weight(int s) const { return weight_of(stats[s]); }
  __device__ void write_stats(const SplitCombineArgs& args) const {
    if (args.stats == nullptr) return;
    args.stats[out_row * 2] = empty() ? -INFINITY : total.m;
    args.stats[out_row * 2 + 1] = empty() ? 0.0f : total.l;
  }
};

__device__ void add_weighted(float4& acc, float w, float4 o) {
  if (w != 0.0f) {
    acc.x += w * o.x;
    acc.y += w * o.y;
    acc.z += w * o.z;
    acc.w += w * o.w;
  }
}

// Columns first, first + step, ... of one row, for ranks that are not a
// multiple of 4 (no float4 loads).
template <typename Out>
__device__ void combine_columns_one_by_one(const RowSplits& r, const float* partial, Out* out, int rank,
                                           int first, int step) {
  for (int d = first; d < rank; d += step) {
    float acc = 0.0f;
    for (int s = 0; s < r.splits && !r.empty(); ++s) {
      const float w = r.weight(s);
      if (w != 0.0f) acc += w * partial[std::int64_t{s} * rank + d];
    }
    out[d] = Out(acc);
  }
}

template <typename Out>
__global__ void __launch_bounds__(32 * kRowsPerBlock) split_combine_rows_kernel(SplitCombineArgs args) {
  // A kernel launched early after this one (a Helix exchange) may start its
  // prologue now; it still waits for this grid before reading the output.
  cuda::allow_next_grid();
  const std::int64_t row = args.wide_rows + std::int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  if (row >= args.total_rows) return;
  const int lane = threadIdx.x % 32;
  RowSplits r(args, row);
  const int rank = args.kv_lora_rank;
  Out* out = static_cast<Out*>(args.out) + r.out_row * rank;
  const float* partial = args.partial_out + r.first * rank;
  // The first two splits' partials are loaded before the statistics are
  // merged: neither depends on the other, so the row costs one round trip
  // to memory after its segment, not a statistics trip and then a
  // partials trip. The weights of the first 32 splits come from their
  // lanes (this shape is picked for rows of a few splits; it still merges
  // any number correctly).
  constexpr int kPass = 4 * kColumnsPerBlock;  // columns per pass: four float4 per lane
  auto load_split = [&](int s, int d0, float4 (&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = d0 + j * kColumnsPerBlock + lane * 4;
      v[j] = d < rank ? *reinterpret_cast<const float4*>(partial + std::int64_t{s} * rank + d)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  float4 even[4], odd[4];  // splits s and s + 1 of the pass
  auto load_first_two = [&](int d0) {
    if (r.splits > 0) load_split(0, d0, even);
    if (r.splits > 1) load_split(1, d0, odd);
  };
  const bool vector = rank % 4 == 0;
  if (vector) load_first_two(0);
  const float2 own = lane < r.splits ? r.stats[lane] : make_float2(-INFINITY, 0.0f);
  MaxSum lane_total;
  lane_total.add(own.x, own.y);
  for (int s = lane + 32; s < r.splits; s += 32) lane_total.add(r.stats[s].x, r.stats[s].y);
  r.set_total(warp_merge(lane_total));
  const float own_weight = r.weight_of(own);
  auto weight = [&](int s) {  // s is the same in every lane
    const float from_lane = __shfl_sync(0xffffffffu, own_weight, s % 32);
    return s < 32 ? from_lane : r.weight(s);
  };
  if (vector) {
    for (int d0 = 0; d0 < rank; d0 += kPass) {
      if (d0 > 0) load_first_two(d0);
      float4 acc[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      // Two splits a round, the next two loaded as soon as these are added.
      for (int s = 0; s < r.splits; s += 2) {
        const float w_even = weight(s);
#pragma unroll
        for (int j = 0; j < 4; ++j) add_weighted(acc[j], w_even, even[j]);
        if (s + 2 < r.splits) load_split(s + 2, d0, even);
        if (s + 1 < r.splits) {
          const float w_odd = weight(s + 1);
#pragma unroll
          for (int j = 0; j < 4; ++j) add_weighted(acc[j], w_odd, odd[j]);
          if (s + 3 < r.splits) load_split(s + 3, d0, odd);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = d0 + j * kColumnsPerBlock + lane * 4;
        if (d < rank) {
          PairCodec<Out>::store(out, d, acc[j].x, acc[j].y);
          PairCodec<Out>::store(out, d + 2, acc[j].z, acc[j].w);
        }
      }
    }
  } else {
    combine_columns_one_by_one(r, partial, out, rank, lane, 32);
  }
  if (lane == 0) r.write_stats(args);
}

template <typename Out>
__global__ void __launch_bounds__(32 * kWideLanes) split_combine_wide_kernel(SplitCombineArgs args) {
  cuda::allow_next_grid();  // as above
  constexpr int kThreads = 32 * kWideLanes;
  __shared__ float2 merge_s[kWideLanes];
  __shared__ float4 lane_sums_s[kWideLanes - 1][32];
  RowSplits r(args, blockIdx.x);
  MaxSum thread_total;
  for (int s = threadIdx.x; s < r.splits; s += kThreads) thread_total.add(r.stats[s].x, r.stats[s].y);
  const MaxSum warp_total = warp_merge(thread_total);
  if (threadIdx.x % 32 == 0) merge_s[threadIdx.x / 32] = make_float2(warp_total.m, warp_total.l);
  __syncthreads();
  MaxSum block_total;
  for (int w = 0; w < kWideLanes; ++w) block_total.add(merge_s[w].x, merge_s[w].y);
  r.set_total(block_total);

  const int rank = args.kv_lora_rank;
  Out* out = static_cast<Out*>(args.out) + r.out_row * rank;
  const float* partial = args.partial_out + r.first * rank;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (rank % 4 == 0) {
    const int d = blockIdx.y * kColumnsPerBlock + lane * 4;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (d < rank && !r.empty()) {
#pragma unroll 8
      for (int s = warp; s < r.splits; s += kWideLanes) {
        add_weighted(acc, r.weight(s), *reinterpret_cast<const float4*>(partial + std::int64_t{s} * rank + d));
      }
    }
    if (warp > 0) lane_sums_s[warp - 1][lane] = acc;
    __syncthreads();
    if (warp == 0 && d < rank) {
      for (int w = 0; w < kWideLanes - 1; ++w) add_weighted(acc, 1.0f, lane_sums_s[w][lane]);
      PairCodec<Out>::store(out, d, acc.x, acc.y);
      PairCodec<Out>::store(out, d + 2, acc.z, acc.w);
    }
  } else {
    combine_columns_one_by_one(r, partial, out, rank, static_cast<int>(threadIdx.x), kThreads);
  }
  if (blockIdx.y == 0 && threadIdx.x == 0) r.write_stats(args);
}

// A Helix exchange launched early behind the combine waits for the last of
// these grids, which itself started only after the first had finished.
template <typename Out>
void launch_for(const SplitCombineArgs& args, cudaStream_t stream) {
  if (args.wide_rows > 0) {
    const unsigned column_blocks =
        args.kv_lora_rank % 4 == 0
            ? static_cast<unsigned>((args.kv_lora_rank + kColumnsPerBlock - 1) / kColumnsPerBlock)
            : 1u;
    launch_kernel(split_combine_wide_kernel<Out>, dim3(static_cast<unsigned>(args.wide_rows), column_blocks),
                  32 * kWideLanes, 0, stream, args);
  }
  if (args.total_rows > args.wide_rows) {
    const auto blocks =
        static_cast<unsigned>((args.total_rows - args.wide_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    launch_kernel(split_combine_rows_kernel<Out>, blocks, 32 * kRowsPerBlock, 0, stream, args);
  }
}

}  // namespace

std::int64_t arrange_split_segments(std::span<SplitSegment> segments) {
  const auto wide = [](const SplitSegment& seg) { return seg.splits >= kSplitCombineWideFromSplits; };
  std::ranges::stable_partition(segments, wide);
  std::int64_t rows = 0;
  std::int64_t wide_rows = 0;
  for (SplitSegment& seg : segments) {
    seg.first_partial_row = rows;
    rows += seg.rows;
    if (wide(seg)) wide_rows = rows;
  }
  return wide_rows;
}

void launch_split_combine(const SplitCombineArgs& args, cudaStream_t stream) {
  if (args.total_rows <= 0) return;
  if (args.num_segments <= 0) {
    throw InvalidArgument("num_segments", -1, std::to_string(args.num_segments),
                          "must be positive when total_rows > 0");
  }
  if (args.wide_rows < 0 || args.wide_rows > args.total_rows) {
    throw InvalidArgument("wide_rows", -1, std::to_string(args.wide_rows),
                          "must lie in [0, total_rows = " + std::to_string(args.total_rows) + "]");
  }
  if (args.kv_lora_rank <= 0) {
    throw InvalidArgument("kv_lora_rank", -1, std::to_string(args.kv_lora_rank), "must be positive");
  }
  switch (args.out_dtype) {
    case DType::bf16:
      launch_for<__nv_bfloat16>(args, stream);
      break;
    case DType::fp16:
      launch_for<__half>(args, stream);
      break;
    default:
      throw InvalidArgument("out_dtype", -1, std::string(to_string(args.out_dtype)),
                            "split combine writes bf16 or fp16");
  }
}

}  // namespace helixmla::cuda

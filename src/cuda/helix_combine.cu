// Device Helix combine: one block per (token, head) row; every thread reads
// the cp statistics (a few floats, cached) and accumulates its columns.
#include <cmath>
#include <string>

#include "core/partial_stats.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/dependent_launch.hpp"
#include "cuda/helix_dtype.cuh"
#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {

namespace {

struct CombineGeometry {
  int cp;
  long long tokens;
  int heads;
  int width;
  long long out_head_stride;
  long long stats_head_stride;
};

constexpr int kThreads = 128;
constexpr int kColumnsPerThread = 4;  // 512 columns (kv_lora_rank) in one pass

template <DType Partial, DType Out>
__global__ void __launch_bounds__(kThreads)
    helix_combine_kernel(const typename cuda::DeviceElement<Partial>::Storage* partial, const float* stats,
                         typename cuda::DeviceElement<Out>::Storage* out, float* out_stats, CombineGeometry g) {
  const long long row = blockIdx.x;  // token * heads + head
  const long long token = row / g.heads;
  const long long head = row % g.heads;
  const long long rank_rows = g.tokens * g.heads;
  cuda::wait_for_previous_grid();  // launched early: the exchange writes the input

  // Every load below is unconditional (no branch in front), so each step is
  // one round trip to memory with all its loads in flight: the statistics,
  // then the partials. A rank whose weight is 0 has its partial loaded but
  // never used (it may hold any bits: nothing was written for it).
  float max_m = -INFINITY;
#pragma unroll 4
  for (int i = 0; i < g.cp; ++i) {
    const float* s = stats + 2 * (i * rank_rows + row);
    if (partial_role(s[0], s[1]) == PartialRole::merged) max_m = fmaxf(max_m, s[0]);
  }
  // Unnormalised: a poisoning partial's NaN reaches the denominator, and
  // through it every weight of the row.
  auto mass = [&](int i) {
    const float* s = stats + 2 * (i * rank_rows + row);
    const PartialRole role = partial_role(s[0], s[1]);
    return role == PartialRole::merged ? s[1] * expf(s[0] - max_m) : role == PartialRole::skipped ? 0.0f : NAN;
  };
  float denominator = 0.0f;
  for (int i = 0; i < g.cp; ++i) denominator += mass(i);
  auto weight = [&](int i) { return denominator != 0.0f ? mass(i) / denominator : 0.0f; };

  const long long out_base = (token * g.out_head_stride + head) * g.width;
  for (int base = 0; base < g.width; base += kThreads * kColumnsPerThread) {
    float acc[kColumnsPerThread] = {};
#pragma unroll 2
    for (int i = 0; i < g.cp; ++i) {
      const float w = weight(i);
      const long long first = (i * rank_rows + row) * g.width;
#pragma unroll
      for (int c = 0; c < kColumnsPerThread; ++c) {
        const int k = base + c * kThreads + static_cast<int>(threadIdx.x);
        if (k < g.width) {
          const float v = cuda::DeviceElement<Partial>::load(partial, first + k);
          if (w != 0.0f) acc[c] += w * v;
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kColumnsPerThread; ++c) {
      const int k = base + c * kThreads + static_cast<int>(threadIdx.x);
      if (k < g.width) cuda::DeviceElement<Out>::store(out, out_base + k, acc[c]);
    }
  }
  if (out_stats != nullptr && threadIdx.x == 0) {
    float* s = out_stats + 2 * (token * g.stats_head_stride + head);
    s[0] = denominator != 0.0f ? max_m : -INFINITY;
    s[1] = denominator;
  }
}

template <DType Partial, DType Out>
void launch(const HelixCombineArgs& a, cudaStream_t stream) {
  using PartialStorage = typename cuda::DeviceElement<Partial>::Storage;
  using OutStorage = typename cuda::DeviceElement<Out>::Storage;
  const CombineGeometry g{a.cp,
                          a.tokens,
                          a.heads,
                          a.width,
                          a.out_head_stride > 0 ? a.out_head_stride : a.heads,
                          a.out_stats_head_stride > 0 ? a.out_stats_head_stride : a.heads};
  // Early: its launch hides behind the exchange, whose end it waits for.
  cuda::launch_early(helix_combine_kernel<Partial, Out>, static_cast<unsigned>(a.tokens * a.heads), kThreads,
                     stream, static_cast<const PartialStorage*>(a.partial), a.stats,
                     static_cast<OutStorage*>(a.out), a.out_stats, g);
}

template <DType Partial>
void launch_for_out(const HelixCombineArgs& a, cudaStream_t stream) {
  switch (a.out_dtype) {
    case DType::bf16: return launch<Partial, DType::bf16>(a, stream);
    case DType::fp16: return launch<Partial, DType::fp16>(a, stream);
    case DType::fp32: return launch<Partial, DType::fp32>(a, stream);
    case DType::fp8_e4m3: break;
  }
  throw InvalidArgument("out_dtype", -1, std::string(to_string(a.out_dtype)),
                        "outputs are bf16, fp16 or fp32");
}

}  // namespace

void helix_combine_device(const HelixCombineArgs& args, void* stream) {
  check_helix_combine_args(args);
  if (args.tokens == 0 || args.heads == 0) return;
  if (args.tokens * args.heads > 0x7fffffffLL) {
    throw InvalidArgument("tokens", -1, std::to_string(args.tokens),
                          "tokens * heads must stay below 2^31 per call");
  }
  auto s = static_cast<cudaStream_t>(stream);
  switch (args.partial_dtype) {
    case DType::bf16: return launch_for_out<DType::bf16>(args, s);
    case DType::fp16: return launch_for_out<DType::fp16>(args, s);
    case DType::fp32: return launch_for_out<DType::fp32>(args, s);
    case DType::fp8_e4m3: break;
  }
  throw InvalidArgument("partial_dtype", -1, std::string(to_string(args.partial_dtype)),
                        "partial outputs are fp32, bf16 or fp16");
}

}  // namespace helixmla

#include "cuda/generic_kernel.cuh"

#include <cmath>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/pair_codec.cuh"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kGenericRowsPerBlock / kWarps;
// A score pass computes rows x tokens = 32 dot products, one per lane after
// the warp's reduce-scatter.
constexpr int kTokensPerPass = 32 / kRowsPerWarp;
constexpr int kPasses = kGenericTileTokens / kTokensPerPass;
// Lane l holds element pairs l, l + 32, l + 64, ...: a chunk is 32 pairs.
constexpr int kKeyChunks = kGenericMaxHeadDim / 64;
constexpr int kValueChunks = kGenericMaxRank / 64;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLn2 = 0.693147180559945309f;

static_assert(kRowsPerWarp * kTokensPerPass == 32, "a pass must fill a warp");
static_assert(kGenericTileTokens % kTokensPerPass == 0, "tiles hold whole passes");

__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// One butterfly stage: lanes keep the half of v[0, 2 * Width) selected by
// their bit `Width` and add the partner's copy of that half.
template <int Width>
__device__ __forceinline__ void reduce_scatter_stage(float (&v)[32], int lane) {
  const bool upper = (lane & Width) != 0;
#pragma unroll
  for (int k = 0; k < Width; ++k) {
    const float low = v[k];
    const float high = v[k + Width];
    const float send = upper ? low : high;
    const float keep = upper ? high : low;
    v[k] = keep + __shfl_xor_sync(kFullMask, send, Width);
  }
}

// Lane l enters with 32 partial sums v[0..31] of 32 different dot products
// and leaves with the full sum of dot product l: 31 shuffles for 32 results
// instead of 5 per result.
__device__ __forceinline__ float reduce_scatter(float (&v)[32], int lane) {
  reduce_scatter_stage<16>(v, lane);
  reduce_scatter_stage<8>(v, lane);
  reduce_scatter_stage<4>(v, lane);
  reduce_scatter_stage<2>(v, lane);
  reduce_scatter_stage<1>(v, lane);
  return v[0];
}

__device__ __forceinline__ float group_max(float value) {
#pragma unroll
  for (int offset = 1; offset < kTokensPerPass; offset <<= 1) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ float group_sum(float value) {
#pragma unroll
  for (int offset = 1; offset < kTokensPerPass; offset <<= 1) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}

// Warp w owns rows [4w, 4w + 4) of the item. In the score phase lane l
// computes row l / 8 against token l % 8 of each pass; in the value phase
// every lane accumulates all four rows over its element pairs.
template <typename Q, typename Kv>
__global__ void __launch_bounds__(kThreads, 2) generic_attention_kernel(const GenericKernelParams p) {
  using QCodec = PairCodec<Q>;
  using KvCodec = PairCodec<Kv>;
  using KvWord = typename KvCodec::Word;
  extern __shared__ __align__(16) unsigned char smem[];

  const GenericWorkItem item = p.items[blockIdx.x];
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int pairs = p.head_dim / 2;
  const int value_pairs = p.kv_lora_rank / 2;
  const int token_bytes = pairs * static_cast<int>(sizeof(KvWord));
  const int tile_bytes = kGenericTileTokens * token_bytes;
  float* probs = reinterpret_cast<float*>(smem + 2 * tile_bytes) +
                 warp * kGenericTileTokens * kRowsPerWarp;
  const int first_row = warp * kRowsPerWarp;
  const int warp_rows = max(0, min(kRowsPerWarp, item.rows - first_row));

  std::uint32_t q[kRowsPerWarp][kKeyChunks];
  const auto* q_words = static_cast<const std::uint32_t*>(p.q);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const std::int64_t row = item.out_row + first_row + r;
#pragma unroll
    for (int i = 0; i < kKeyChunks; ++i) {
      const int pair = lane + 32 * i;
      q[r][i] = (r < warp_rows && pair < pairs) ? q_words[row * pairs + pair] : 0u;
    }
  }

  const int my_row = lane / kTokensPerPass;
  const int my_token = lane % kTokensPerPass;
  int bound = 0;
  if (my_row < warp_rows) {
    const std::int64_t token = (item.out_row + first_row + my_row) / p.num_heads;
    bound = min(p.token_bounds[token], item.kv_end);
  }

  const std::int32_t* pages = p.page_table + static_cast<std::int64_t>(item.request) * p.page_table_stride;
  const auto* pool = static_cast<const unsigned char*>(p.pool);
  const int chunks_per_token = token_bytes / 16;
  const auto load_tile = [&](int tile, int buffer) {
    const int tile_begin = item.kv_begin + tile * kGenericTileTokens;
    unsigned char* tile_smem = smem + buffer * tile_bytes;
    for (int c = static_cast<int>(threadIdx.x); c < kGenericTileTokens * chunks_per_token; c += kThreads) {
      const int t = c / chunks_per_token;
      const int part = c - t * chunks_per_token;
      const int pos = tile_begin + t;
      unsigned char* dst = tile_smem + t * token_bytes + part * 16;
      if (pos < item.kv_end) {
        const std::int64_t slot =
            static_cast<std::int64_t>(pages[pos / p.page_size]) * p.page_size + pos % p.page_size;
        cp_async_16(dst, pool + slot * token_bytes + part * 16);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    cp_async_commit();
  };

  float o[kRowsPerWarp][kValueChunks][2];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int i = 0; i < kValueChunks; ++i) o[r][i][0] = o[r][i][1] = 0.0f;
  }
  float m = -INFINITY;  // running max of my_row's logits, base-2 units
  float l = 0.0f;       // running sum of 2^(logit - m)

  const int span = item.kv_end - item.kv_begin;
  const int tiles = span > 0 ? (span + kGenericTileTokens - 1) / kGenericTileTokens : 0;
  if (tiles > 0) load_tile(0, 0);
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) {
      load_tile(tile + 1, (tile + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (warp_rows > 0) {
      const unsigned char* kv = smem + (tile & 1) * tile_bytes;
      const int tile_begin = item.kv_begin + tile * kGenericTileTokens;
      const int valid = min(kGenericTileTokens, item.kv_end - tile_begin);

      // Scores go through the warp's probability buffer: each lane reads back
      // only what it wrote, so no barrier is needed, and the pass loop can
      // stay rolled (an unrolled one keeps too many registers live).
      float* my_slot = probs + my_token * kRowsPerWarp + my_row;
#pragma unroll 1
      for (int pass = 0; pass < kPasses; ++pass) {
        float score = -INFINITY;
        if (pass * kTokensPerPass < valid) {
          float acc[32];
#pragma unroll
          for (int k = 0; k < 32; ++k) acc[k] = 0.0f;
          const unsigned char* pass_kv = kv + pass * kTokensPerPass * token_bytes;
#pragma unroll
          for (int i = 0; i < kKeyChunks; ++i) {
            if (32 * i >= pairs) continue;
            const int pair = lane + 32 * i;
            float2 qf[kRowsPerWarp];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) qf[r] = QCodec::decode(q[r][i]);
#pragma unroll
            for (int t = 0; t < kTokensPerPass; ++t) {
              const auto* key = reinterpret_cast<const KvWord*>(pass_kv + t * token_bytes);
              const float2 kf = pair < pairs ? KvCodec::decode(key[pair]) : make_float2(0.0f, 0.0f);
#pragma unroll
              for (int r = 0; r < kRowsPerWarp; ++r) {
                float& a = acc[r * kTokensPerPass + t];
                a = fmaf(qf[r].x, kf.x, fmaf(qf[r].y, kf.y, a));
              }
            }
          }
          const float dot = reduce_scatter(acc, lane);
          if (tile_begin + pass * kTokensPerPass + my_token < bound) score = dot * p.score_scale;
        }
        my_slot[pass * kTokensPerPass * kRowsPerWarp] = score;
      }

      float s[kPasses];
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) s[pass] = my_slot[pass * kTokensPerPass * kRowsPerWarp];
      float tile_max = s[0];
#pragma unroll
      for (int pass = 1; pass < kPasses; ++pass) tile_max = fmaxf(tile_max, s[pass]);
      const float m_new = fmaxf(m, group_max(tile_max));
      const bool nothing_seen = m_new == -INFINITY;
      const float alpha = nothing_seen ? 1.0f : exp2f(m - m_new);
      float p_sum = 0.0f;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const float prob = nothing_seen ? 0.0f : exp2f(s[pass] - m_new);
        p_sum += prob;
        my_slot[pass * kTokensPerPass * kRowsPerWarp] = prob;
      }
      l = l * alpha + group_sum(p_sum);
      m = m_new;

      float row_alpha[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) row_alpha[r] = __shfl_sync(kFullMask, alpha, r * kTokensPerPass);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
        for (int i = 0; i < kValueChunks; ++i) {
          o[r][i][0] *= row_alpha[r];
          o[r][i][1] *= row_alpha[r];
        }
      }
      __syncwarp();

#pragma unroll 2
      for (int j = 0; j < valid; ++j) {
        const float4 pr = *reinterpret_cast<const float4*>(probs + j * kRowsPerWarp);
        const float pj[kRowsPerWarp] = {pr.x, pr.y, pr.z, pr.w};
        const auto* value = reinterpret_cast<const KvWord*>(kv + j * token_bytes);
#pragma unroll
        for (int i = 0; i < kValueChunks; ++i) {
          if (32 * i >= value_pairs) continue;
          const int pair = lane + 32 * i;
          const float2 v = pair < value_pairs ? KvCodec::decode(value[pair]) : make_float2(0.0f, 0.0f);
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            o[r][i][0] = fmaf(pj[r], v.x, o[r][i][0]);
            o[r][i][1] = fmaf(pj[r], v.y, o[r][i][1]);
          }
        }
      }
      __syncwarp();
    }
    __syncthreads();
  }

  if (warp_rows == 0) return;
  const bool direct = item.partial_entry < 0;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const float row_l = __shfl_sync(kFullMask, l, r * kTokensPerPass);
    if (r >= warp_rows) continue;
    const float scale = row_l != 0.0f ? p.value_scale / row_l : 0.0f;
    const std::int64_t row = first_row + r;
    if (direct) {
      Q* out = static_cast<Q*>(p.out) + (item.out_row + row) * p.kv_lora_rank;
#pragma unroll
      for (int i = 0; i < kValueChunks; ++i) {
        const int pair = lane + 32 * i;
        if (pair < value_pairs) QCodec::store(out, 2 * pair, o[r][i][0] * scale, o[r][i][1] * scale);
      }
    } else {
      const std::int64_t entry = item.partial_entry + row * item.partial_stride;
      auto* out = reinterpret_cast<float2*>(p.partial_out + entry * p.kv_lora_rank);
#pragma unroll
      for (int i = 0; i < kValueChunks; ++i) {
        const int pair = lane + 32 * i;
        if (pair < value_pairs) out[pair] = make_float2(o[r][i][0] * scale, o[r][i][1] * scale);
      }
    }
  }
  if (my_token == 0 && my_row < warp_rows) {
    // Not l > 0: a NaN l (NaN in the row's scores) must stay NaN in o and
    // the stats, not pass for an empty row (core/partial_stats.hpp).
    const bool seen = l != 0.0f;
    const float m_out = seen ? m * kLn2 : -INFINITY;
    const float l_out = seen ? l : 0.0f;
    const std::int64_t row = first_row + my_row;
    float* stats = direct ? (p.stats != nullptr ? p.stats + (item.out_row + row) * 2 : nullptr)
                          : p.partial_stats + (item.partial_entry + row * item.partial_stride) * 2;
    if (stats != nullptr) {
      stats[0] = m_out;
      stats[1] = l_out;
    }
  }
}

using KernelFunction = void (*)(GenericKernelParams);

KernelFunction kernel_for(DType q_dtype, DType kv_dtype) {
  if (q_dtype == DType::bf16 && kv_dtype == DType::bf16) {
    return generic_attention_kernel<__nv_bfloat16, __nv_bfloat16>;
  }
  if (q_dtype == DType::fp16 && kv_dtype == DType::fp16) return generic_attention_kernel<__half, __half>;
  if (q_dtype == DType::bf16 && kv_dtype == DType::fp8_e4m3) {
    return generic_attention_kernel<__nv_bfloat16, __nv_fp8_e4m3>;
  }
  if (q_dtype == DType::fp16 && kv_dtype == DType::fp8_e4m3) {
    return generic_attention_kernel<__half, __nv_fp8_e4m3>;
  }
  throw InvalidArgument("kv.dtype", -1, std::string(to_string(kv_dtype)),
                        "no generic kernel for q_dtype " + std::string(to_string(q_dtype)) +
                            " with this KV dtype");
}

}  // namespace

std::size_t generic_smem_bytes(DType kv_dtype, int head_dim) {
  const std::size_t tile = static_cast<std::size_t>(kGenericTileTokens) * head_dim * dtype_size(kv_dtype);
  return 2 * tile + static_cast<std::size_t>(kWarps) * kGenericTileTokens * kRowsPerWarp * sizeof(float);
}

// The limit is set for the widest head_dim, not the phase's: a run prepared
// earlier with wider dims must still launch after a narrower one.
void configure_generic_attention(DType q_dtype, DType kv_dtype) {
  HELIXMLA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel_for(q_dtype, kv_dtype)),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(generic_smem_bytes(kv_dtype, kGenericMaxHeadDim))));
}

void launch_generic_attention(const GenericKernelParams& params, cudaStream_t stream) {
  if (params.num_items <= 0) return;
  const KernelFunction kernel = kernel_for(params.q_dtype, params.kv_dtype);
  launch_kernel(kernel, static_cast<unsigned>(params.num_items), kThreads,
                generic_smem_bytes(params.kv_dtype, params.head_dim), stream, params);
}

}  // namespace helixmla::cuda

// Two neighbouring 16-bit or 8-bit elements moved as one word, decoded to or
// encoded from float2. The CUDA kernels read and write KV, queries and
// outputs two values per lane at a time so that a warp touches 32
// consecutive words (conflict-free shared memory, coalesced global memory).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace helixmla::cuda {

template <typename T>
struct PairCodec;

template <>
struct PairCodec<__nv_bfloat16> {
  using Word = std::uint32_t;
  // bf16 is the upper half of a float32, so decoding is two bit moves.
  __device__ static float2 decode(Word w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  __device__ static void store(__nv_bfloat16* out, std::int64_t index, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(out + index) = __floats2bfloat162_rn(a, b);
  }
};

template <>
struct PairCodec<__half> {
  using Word = std::uint32_t;
  __device__ static float2 decode(Word w) {
    __half2_raw raw;
    raw.x = static_cast<unsigned short>(w & 0xffffu);
    raw.y = static_cast<unsigned short>(w >> 16);
    return __half22float2(__half2(raw));
  }
  __device__ static void store(__half* out, std::int64_t index, float a, float b) {
    *reinterpret_cast<__half2*>(out + index) = __floats2half2_rn(a, b);
  }
};

template <>
struct PairCodec<__nv_fp8_e4m3> {
  using Word = std::uint16_t;
  // One cvt on sm_89 and newer (e4m3x2 -> f16x2); exact, since every e4m3
  // value is representable in fp16.
  __device__ static float2 decode(Word w) {
    const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w), __NV_E4M3);
    return __half22float2(__half2(raw));
  }
};

}  // namespace helixmla::cuda

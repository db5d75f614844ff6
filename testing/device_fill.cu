#include "device_fill.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "helixmla/error.hpp"

namespace helixmla::testing {

namespace {

__device__ float hash_uniform(std::uint64_t seed, std::int64_t index) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}

template <typename T>
__device__ T convert(float v);
template <>
__device__ __nv_bfloat16 convert(float v) { return __float2bfloat16(v); }
template <>
__device__ __half convert(float v) { return __float2half(v); }
template <>
__device__ __nv_fp8_e4m3 convert(float v) { return __nv_fp8_e4m3(v); }
template <>
__device__ float convert(float v) { return v; }

template <typename T>
__global__ void fill_kernel(T* data, std::int64_t count, float amplitude, float inverse_scale, std::uint64_t seed) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float u = hash_uniform(seed, i) * 2.0f - 1.0f;
    data[i] = convert<T>(u * amplitude * inverse_scale);
  }
}

template <typename T>
void launch(void* data, std::int64_t count, float amplitude, float inverse_scale, std::uint64_t seed) {
  fill_kernel<T><<<2048, 256>>>(static_cast<T*>(data), count, amplitude, inverse_scale, seed);
}

}  // namespace

void fill_random_device(void* data, DType dtype, std::int64_t count, float amplitude, float inverse_scale,
                        std::uint64_t seed) {
  switch (dtype) {
    case DType::bf16: launch<__nv_bfloat16>(data, count, amplitude, inverse_scale, seed); break;
    case DType::fp16: launch<__half>(data, count, amplitude, inverse_scale, seed); break;
    case DType::fp8_e4m3: launch<__nv_fp8_e4m3>(data, count, amplitude, inverse_scale, seed); break;
    case DType::fp32: launch<float>(data, count, amplitude, inverse_scale, seed); break;
  }
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw RuntimeFailure(std::string("fill_random_device: ") + cudaGetErrorString(status));
}

}  // namespace helixmla::testing

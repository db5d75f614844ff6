// Device element conversions for the Helix kernels that must agree bit for
// bit with the host conversions of src/core/dtype.cpp (same algorithm, same
// round-to-nearest-even, same saturation), so device and host twins of the KV
// append write identical caches.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "helixmla/dtype.hpp"

namespace helixmla::cuda {

__device__ __forceinline__ float bf16_bits_to_float(std::uint16_t bits) {
  return __uint_as_float(static_cast<std::uint32_t>(bits) << 16);
}

__device__ __forceinline__ std::uint16_t float_to_bf16_bits(float value) {
  std::uint32_t u = __float_as_uint(value);
  if (isnan(value)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

__device__ __forceinline__ float fp16_bits_to_float(std::uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ std::uint16_t float_to_fp16_bits(float value) {
  const std::uint32_t u = __float_as_uint(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const float a = fabsf(value);
  if (isnan(value)) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) {  // 2^-14: subnormal, units of 2^-24
    const float units = rintf(a * 16777216.0f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));
  }
  int e = 0;
  const float m = frexpf(a, &e);
  float mant = rintf(ldexpf(m, 11));
  if (mant >= 2048.0f) {
    mant *= 0.5f;
    ++e;
  }
  const int biased = e - 1 + 15;
  if (biased >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  return static_cast<std::uint16_t>(sign | (biased << 10) | (static_cast<int>(mant) - 1024));
}

__device__ __forceinline__ std::uint8_t float_to_fp8_e4m3_bits(float value) {
  const std::uint8_t sign = signbit(value) ? 0x80 : 0x00;
  if (isnan(value)) return 0x7f;
  const float a = fabsf(value);
  if (a >= 448.0f) return static_cast<std::uint8_t>(sign | 0x7e);
  if (a < 0.015625f) {  // 2^-6: subnormal, units of 2^-9
    const float units = rintf(a * 512.0f);
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(units));
  }
  int e = 0;
  const float m = frexpf(a, &e);
  float mant = rintf(ldexpf(m, 4));
  if (mant >= 16.0f) {
    mant *= 0.5f;
    ++e;
  }
  const int biased = e - 1 + 7;
  const int code = (biased << 3) | (static_cast<int>(mant) - 8);
  return static_cast<std::uint8_t>(sign | (code > 0x7e ? 0x7e : code));
}

template <DType D>
struct DeviceElement;

template <>
struct DeviceElement<DType::bf16> {
  using Storage = std::uint16_t;
  __device__ static float load(const Storage* p, long long i) { return bf16_bits_to_float(p[i]); }
  __device__ static void store(Storage* p, long long i, float v) { p[i] = float_to_bf16_bits(v); }
};

template <>
struct DeviceElement<DType::fp16> {
  using Storage = std::uint16_t;
  __device__ static float load(const Storage* p, long long i) { return fp16_bits_to_float(p[i]); }
  __device__ static void store(Storage* p, long long i, float v) { p[i] = float_to_fp16_bits(v); }
};

template <>
struct DeviceElement<DType::fp8_e4m3> {
  using Storage = std::uint8_t;
  __device__ static void store(Storage* p, long long i, float v) { p[i] = float_to_fp8_e4m3_bits(v); }
};

template <>
struct DeviceElement<DType::fp32> {
  using Storage = float;
  __device__ static float load(const Storage* p, long long i) { return p[i]; }
  __device__ static void store(Storage* p, long long i, float v) { p[i] = v; }
};

}  // namespace helixmla::cuda

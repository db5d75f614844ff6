#include "helixmla/dtype.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace helixmla {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp8_e4m3: return "fp8";
    case DType::fp32: return "fp32";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "f16" || name == "half" || name == "float16") return DType::fp16;
  if (name == "fp8" || name == "fp8_e4m3" || name == "e4m3") return DType::fp8_e4m3;
  if (name == "fp32" || name == "f32" || name == "float32") return DType::fp32;
  return std::nullopt;
}

std::optional<DType> parse_kv_dtype(std::string_view name) {
  const std::optional<DType> dtype = parse_dtype(name);
  if (dtype == DType::fp32) return std::nullopt;
  return dtype;
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::fp8_e4m3: return 1;
    case DType::fp32: return 4;
  }
  return 0;
}

float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bf16(float value) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

float fp16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = (bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1f;
  const std::uint32_t man = bits & 0x3ff;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    magnitude = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    magnitude = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
}

std::uint16_t float_to_fp16(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (a >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7c00);
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even by the FPU.
    const float units = std::nearbyint(a * std::ldexp(1.0f, 24));
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  float mant = std::nearbyint(std::ldexp(m, 11));  // 11 significant bits
  if (mant >= 2048.0f) {
    mant /= 2.0f;
    ++e;
  }
  const int biased = e - 1 + 15;
  if (biased >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);
  return static_cast<std::uint16_t>(sign | (biased << 10) | (static_cast<int>(mant) - 1024));
}

float fp8_e4m3_to_float(std::uint8_t bits) {
  const bool negative = bits & 0x80;
  const int exp = (bits >> 3) & 0xf;
  const int man = bits & 0x7;
  float magnitude;
  if (exp == 0xf && man == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(man), -9);
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + man), exp - 10);
  }
  return negative ? -magnitude : magnitude;
}

std::uint8_t float_to_fp8_e4m3(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return 0x7f;
  float a = std::fabs(value);
  if (a >= 448.0f) return static_cast<std::uint8_t>(sign | 0x7e);
  if (a < std::ldexp(1.0f, -6)) {
    const float units = std::nearbyint(a * std::ldexp(1.0f, 9));  // subnormal step 2^-9
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(units));
  }
  int e = 0;
  const float m = std::frexp(a, &e);
  float mant = std::nearbyint(std::ldexp(m, 4));  // 4 significant bits
  if (mant >= 16.0f) {
    mant /= 2.0f;
    ++e;
  }
  const int biased = e - 1 + 7;
  const int code = (biased << 3) | (static_cast<int>(mant) - 8);
  return static_cast<std::uint8_t>(sign | (code > 0x7e ? 0x7e : code));
}

float load_as_float(const void* data, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case DType::fp16: return fp16_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case DType::fp8_e4m3: return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(data)[index]);
    case DType::fp32: return static_cast<const float*>(data)[index];
  }
  return std::numeric_limits<float>::quiet_NaN();
}

void store_from_float(void* data, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::bf16: static_cast<std::uint16_t*>(data)[index] = float_to_bf16(value); break;
    case DType::fp16: static_cast<std::uint16_t*>(data)[index] = float_to_fp16(value); break;
    case DType::fp8_e4m3: static_cast<std::uint8_t*>(data)[index] = float_to_fp8_e4m3(value); break;
    case DType::fp32: static_cast<float*>(data)[index] = value; break;
  }
}

}  // namespace helixmla

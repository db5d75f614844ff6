// Host conversions of the element types, against their definitions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "helixmla/dtype.hpp"

namespace helixmla {
namespace {

// OCP e4m3fn by definition: bias 7, 3 mantissa bits, subnormals at exponent
// field 0, only S.1111.111 is NaN, no infinities.
double e4m3_definition(unsigned code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const unsigned exponent = (code >> 3) & 0xf;
  const unsigned mantissa = code & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * (mantissa / 8.0) * std::pow(2.0, -6);
  return sign * (1.0 + mantissa / 8.0) * std::pow(2.0, static_cast<int>(exponent) - 7);
}

TEST(Fp8E4m3, DecodesAllCodesExactly) {
  for (unsigned code = 0; code < 256; ++code) {
    const float decoded = fp8_e4m3_to_float(static_cast<std::uint8_t>(code));
    const double expected = e4m3_definition(code);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(decoded)) << "code " << code;
    } else {
      EXPECT_EQ(static_cast<double>(decoded), expected) << "code " << code;
      EXPECT_EQ(std::signbit(decoded), (code & 0x80) != 0) << "code " << code;
    }
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4m3, EncodeRoundTripsEveryFiniteCode) {
  for (unsigned code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const float value = fp8_e4m3_to_float(static_cast<std::uint8_t>(code));
    EXPECT_EQ(float_to_fp8_e4m3(value), code) << "value " << value;
  }
}

TEST(Fp8E4m3, SaturatesAt448AndKeepsNaN) {
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(470.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(1.0e6f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1.0e6f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(float_to_fp8_e4m3(std::nanf("")))));
}

TEST(Fp8E4m3, RoundsToNearestEven) {
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);   // tie between 1 and 1.125: even is 1
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);   // tie between 1.125 and 1.25: even is 1.25
  EXPECT_EQ(float_to_fp8_e4m3(1.07f), 0x39);     // above the tie
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);      // half the smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);  // tie 1.5 units: even is 2
  EXPECT_EQ(float_to_fp8_e4m3(7.5f * std::ldexp(1.0f, -9)), 0x08);   // tie rounds up into the normals
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Bf16, RoundTripsEveryNonNaNCode) {
  for (std::uint32_t code = 0; code < 0x10000; ++code) {
    const float value = bf16_to_float(static_cast<std::uint16_t>(code));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(value), code << 16);
    if (std::isnan(value)) continue;
    ASSERT_EQ(float_to_bf16(value), code) << "code " << code;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: even is 1
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: even is 1 + 2^-6
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-1.0f - std::ldexp(1.0f, -8)), 0xbf80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
}

// IEEE binary16 by definition: bias 15, 10 mantissa bits, subnormals at
// exponent field 0, infinities and NaNs at field 31.
double fp16_definition(unsigned code) {
  const double sign = (code & 0x8000) ? -1.0 : 1.0;
  const unsigned exponent = (code >> 10) & 0x1f;
  const unsigned mantissa = code & 0x3ff;
  if (exponent == 0x1f) return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                                             : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * (mantissa / 1024.0) * std::pow(2.0, -14);
  return sign * (1.0 + mantissa / 1024.0) * std::pow(2.0, static_cast<int>(exponent) - 15);
}

// The round trip below would pass a decoder and an encoder wrong alike.
TEST(Fp16, DecodesAllCodesExactly) {
  for (unsigned code = 0; code < 0x10000; ++code) {
    const float decoded = fp16_to_float(static_cast<std::uint16_t>(code));
    const double expected = fp16_definition(code);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(decoded)) << "code " << code;
    } else {
      ASSERT_EQ(static_cast<double>(decoded), expected) << "code " << code;
      ASSERT_EQ(std::signbit(decoded), (code & 0x8000) != 0) << "code " << code;
    }
  }
}

TEST(Fp16, RoundTripsEveryNonNaNCode) {
  for (std::uint32_t code = 0; code < 0x10000; ++code) {
    const float value = fp16_to_float(static_cast<std::uint16_t>(code));
    if (std::isnan(value)) continue;
    ASSERT_EQ(float_to_fp16(value), code) << "code " << code;
  }
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x3555), static_cast<float>(1365.0 / 1024.0 / 4.0));
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: even is 1
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: even mantissa 2
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);                          // below the overflow tie
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);                          // tie rounds up to inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);             // subnormal tie: even is 0
  EXPECT_EQ(float_to_fp16(3 * std::ldexp(1.0f, -25)), 0x0002);         // subnormal tie: even is 2
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
}

TEST(DTypes, LoadAndStoreAgreeWithTheConverters) {
  std::uint16_t half[2] = {};
  std::uint8_t byte[2] = {};
  store_from_float(half, DType::bf16, 1, 3.140625f);
  EXPECT_EQ(half[1], float_to_bf16(3.140625f));
  EXPECT_EQ(load_as_float(half, DType::bf16, 1), 3.140625f);
  store_from_float(half, DType::fp16, 0, -0.333f);
  EXPECT_EQ(load_as_float(half, DType::fp16, 0), fp16_to_float(float_to_fp16(-0.333f)));
  store_from_float(byte, DType::fp8_e4m3, 1, 13.0f);
  EXPECT_EQ(byte[1], 0x55);  // 13 = 1.625 * 2^3: exponent field 10, mantissa 5
  EXPECT_EQ(load_as_float(byte, DType::fp8_e4m3, 1), 13.0f);
  EXPECT_EQ(dtype_size(DType::fp8_e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::fp32), 4u);
}

// KV-cache names: what parse_dtype reads, aliases included, but no float32.
TEST(DTypes, KvCacheNamesExcludeFloat32) {
  EXPECT_EQ(parse_kv_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_kv_dtype("fp16"), DType::fp16);
  EXPECT_EQ(parse_kv_dtype("fp8"), DType::fp8_e4m3);
  EXPECT_EQ(parse_kv_dtype("e4m3"), DType::fp8_e4m3);
  EXPECT_EQ(parse_kv_dtype("fp32"), std::nullopt);
  EXPECT_EQ(parse_kv_dtype("int4"), std::nullopt);
  EXPECT_EQ(parse_dtype("fp32"), DType::fp32);
}

}  // namespace
}  // namespace helixmla

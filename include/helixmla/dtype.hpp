// Element types of queries, KV cache, outputs and statistics, with the host
// conversions every backend and test shares (bit-exact, round-to-nearest-even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace helixmla {

enum class DType : std::uint8_t { bf16, fp16, fp8_e4m3, fp32 };

std::string_view to_string(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);
// A KV-cache element type: the names parse_dtype takes, but not fp32 (no
// backend stores a float32 cache).
std::optional<DType> parse_kv_dtype(std::string_view name);
std::size_t dtype_size(DType dtype);

float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);
float fp16_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16(float value);
// OCP e4m3fn: no infinities, 0x7f/0xff are NaN, largest finite 448.
float fp8_e4m3_to_float(std::uint8_t bits);
// Saturates to +-448 (the convention of inference engines' KV quantisers).
std::uint8_t float_to_fp8_e4m3(float value);

// Decodes element `index` of a buffer of `dtype` to float.
float load_as_float(const void* data, DType dtype, std::int64_t index);
// Encodes `value` into element `index` of a buffer of `dtype`.
void store_from_float(void* data, DType dtype, std::int64_t index, float value);

}  // namespace helixmla

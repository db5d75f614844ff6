// Helix KV append, host twin: each rank writes exactly the new rows whose
// page it owns, quantised bit-exactly (value / scale, saturating fp8), and
// leaves every other byte of its pool alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {
namespace {

constexpr std::int32_t kWidth = 576;

struct AppendCase {
  DType new_dtype;
  DType kv_dtype;
  float scale;
};

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> bytes(n);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  return bytes;
}

// New rows spanning the interesting fp8 ranges: saturation beyond 448 * scale,
// subnormals, signed zeros, and ordinary values.
std::vector<std::byte> new_rows(DType dtype, std::int64_t tokens, float scale, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> ordinary(-2.0f, 2.0f);
  std::vector<std::byte> rows(static_cast<std::size_t>(tokens * kWidth) * dtype_size(dtype));
  for (std::int64_t i = 0; i < tokens * kWidth; ++i) {
    float v = ordinary(rng);
    switch (i % 7) {
      case 1: v *= 600.0f * scale; break;                // beyond the fp8 range
      case 2: v *= 0.01f * scale; break;                 // fp8 subnormals
      case 3: v = (i % 2 ? -0.0f : 0.0f); break;
      default: v *= 40.0f * scale; break;
    }
    store_from_float(rows.data(), dtype, i, v);
  }
  return rows;
}

void check_append(const AppendCase& c, std::int32_t cp) {
  const std::vector<std::int32_t> q_len = {1, 4, 2, 3};
  const std::vector<std::int32_t> kv_len = {40, 66, 2, 128};
  const std::int32_t page = 32, stride = 4, num_pages = 14;
  const std::vector<std::int32_t> table = {0, 1, -1, -1, 2, 3, 4, -1, 5, -1, -1, -1, 6, 7, 8, 9};
  const std::int64_t tokens = 10;
  const auto rows = new_rows(c.new_dtype, tokens, c.scale, 17);
  const std::size_t pool_bytes = static_cast<std::size_t>(num_pages) * page * kWidth * dtype_size(c.kv_dtype);

  std::vector<int> written(static_cast<std::size_t>(tokens), 0);
  for (std::int32_t r = 0; r < cp; ++r) {
    const auto before = random_bytes(pool_bytes, 100 + r);
    auto pool = before;
    const auto dest = helix_kv_append_rows(q_len, kv_len, table, stride, page, num_pages, cp, r);
    KvAppendArgs args;
    args.pool = pool.data();
    args.num_pages = num_pages;
    args.page_size = page;
    args.kv_dtype = c.kv_dtype;
    args.kv_scale = c.scale;
    args.new_rows = rows.data();
    args.new_dtype = c.new_dtype;
    args.tokens = tokens;
    args.destinations = dest.data();
    kv_append_host(args);

    std::vector<bool> target(static_cast<std::size_t>(num_pages) * page, false);
    for (std::int64_t t = 0; t < tokens; ++t) {
      if (dest[t] < 0) continue;
      ++written[static_cast<std::size_t>(t)];
      target[static_cast<std::size_t>(dest[t])] = true;
      for (std::int32_t k = 0; k < kWidth; ++k) {
        const float value = load_as_float(rows.data(), c.new_dtype, t * kWidth + k) / c.scale;
        const std::int64_t index = dest[t] * kWidth + k;
        if (c.kv_dtype == DType::fp8_e4m3) {
          ASSERT_EQ(static_cast<std::uint8_t>(pool[static_cast<std::size_t>(index)]), float_to_fp8_e4m3(value))
              << "token " << t << " column " << k << " value " << value;
        } else {
          std::vector<std::byte> expected(dtype_size(c.kv_dtype));
          store_from_float(expected.data(), c.kv_dtype, 0, value);
          ASSERT_EQ(std::memcmp(pool.data() + index * dtype_size(c.kv_dtype), expected.data(), expected.size()), 0)
              << "token " << t << " column " << k;
        }
      }
    }
    const std::size_t row_bytes = kWidth * dtype_size(c.kv_dtype);
    for (std::size_t row = 0; row < target.size(); ++row) {
      if (target[row]) continue;
      ASSERT_EQ(std::memcmp(pool.data() + row * row_bytes, before.data() + row * row_bytes, row_bytes), 0)
          << "rank " << r << " touched pool row " << row << " that is not one of its new rows";
    }
  }
  for (std::int64_t t = 0; t < tokens; ++t) EXPECT_EQ(written[static_cast<std::size_t>(t)], 1) << "token " << t;
}

TEST(KvAppend, Fp8CacheIsBitExactAndOnlyOwnedRowsChange) {
  for (std::int32_t cp : {1, 2, 3, 4, 8}) {
    check_append({DType::bf16, DType::fp8_e4m3, 1.0f / 64.0f}, cp);
    check_append({DType::fp16, DType::fp8_e4m3, 0.37f}, cp);
  }
}

TEST(KvAppend, HalfCachesConvertExactly) {
  for (std::int32_t cp : {1, 3}) {
    check_append({DType::bf16, DType::bf16, 1.0f}, cp);
    check_append({DType::fp16, DType::fp16, 1.0f}, cp);
    check_append({DType::fp16, DType::bf16, 0.5f}, cp);
  }
}

TEST(KvAppend, SaturatesInsteadOfProducingNan) {
  const std::vector<std::int32_t> q_len = {1}, kv_len = {1}, table = {0};
  const auto dest = helix_kv_append_rows(q_len, kv_len, table, 1, 4, 1, 1, 0);
  std::vector<std::uint16_t> row(kWidth, float_to_bf16(1.0e4f));
  row[1] = float_to_bf16(-1.0e4f);
  std::vector<std::uint8_t> pool(4 * kWidth, 0);
  KvAppendArgs args;
  args.pool = pool.data();
  args.num_pages = 1;
  args.page_size = 4;
  args.kv_dtype = DType::fp8_e4m3;
  args.kv_scale = 1.0f;
  args.new_rows = row.data();
  args.new_dtype = DType::bf16;
  args.tokens = 1;
  args.destinations = dest.data();
  kv_append_host(args);
  EXPECT_EQ(pool[0], 0x7e);  // +448
  EXPECT_EQ(pool[1], 0xfe);  // -448
}

TEST(KvAppend, RejectsDestinationsOutsideThePool) {
  std::vector<std::uint16_t> row(kWidth, 0x3f80);
  std::vector<std::uint16_t> pool(2 * kWidth, 0);
  const std::vector<std::int64_t> dest = {2};
  KvAppendArgs args;
  args.pool = pool.data();
  args.num_pages = 1;
  args.page_size = 2;
  args.new_rows = row.data();
  args.tokens = 1;
  args.destinations = dest.data();
  try {
    kv_append_host(args);
    FAIL() << "pool row 2 of 2 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "destinations");
    EXPECT_EQ(e.index(), 0);
  }
  // -1 alone means "another rank's token"; any other negative is an error,
  // not a token left unwritten.
  const std::vector<std::int64_t> negative = {-2};
  args.destinations = negative.data();
  try {
    kv_append_host(args);
    FAIL() << "destination -2 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "destinations");
    EXPECT_EQ(e.value(), "-2");
  }
  args.destinations = dest.data();
  args.kv_scale = 0.0f;
  EXPECT_THROW(kv_append_host(args), InvalidArgument);
}

}  // namespace
}  // namespace helixmla

// The test batches' KV pool: rows no request can see hold NaN, so every test
// built on them fails when a backend lets such a row reach its output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "helixmla/reference.hpp"
#include "helixmla/validate.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

// Rows reached through the page table, marked without unused_kv_rows.
std::vector<bool> rows_seen(const testing::SyntheticBatch& batch) {
  const std::int64_t width = batch.spec().dims.head_dim();
  std::vector<bool> seen(static_cast<std::size_t>(batch.num_pages() * batch.spec().page_size), false);
  for (std::int32_t r = 0; r < static_cast<std::int32_t>(batch.kv_len_.size()); ++r) {
    for (std::int32_t position = 0; position < batch.kv_len_[r]; ++position) {
      seen[static_cast<std::size_t>(batch.pool_row(r, position) / width)] = true;
    }
  }
  return seen;
}

// Every byte of an unseen row is 0xff; every value of a seen row is finite.
void expect_poison_on_unseen_rows_only(const testing::SyntheticBatch& batch, const std::string& label) {
  const std::vector<bool> seen = rows_seen(batch);
  const std::int64_t width = batch.spec().dims.head_dim();
  const DType dtype = batch.spec().kv_dtype;
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(dtype);
  std::int64_t unseen = 0;
  for (std::int64_t row = 0; row < static_cast<std::int64_t>(seen.size()); ++row) {
    if (seen[static_cast<std::size_t>(row)]) {
      for (std::int64_t k = 0; k < width; ++k) {
        ASSERT_TRUE(std::isfinite(load_as_float(batch.pool_.data(), dtype, row * width + k)))
            << label << ": seen row " << row << " value " << k;
      }
    } else {
      ++unseen;
      const std::vector<std::byte> poison(row_bytes, std::byte{0xff});
      ASSERT_EQ(std::memcmp(batch.pool_.data() + row * row_bytes, poison.data(), row_bytes), 0)
          << label << ": unseen row " << row;
      ASSERT_TRUE(std::isnan(load_as_float(batch.pool_.data(), dtype, row * width))) << label;
    }
  }
  EXPECT_GT(unseen, batch.spec().spare_pages * std::int64_t{batch.spec().page_size}) << label << ": no tails poisoned";
}

testing::BatchSpec ragged_spec(DType kv_dtype) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 3;
  spec.q_len = 2;
  spec.kv_len = {2, 17, 40, 64};  // tails of several lengths, and a full last page
  spec.contexts = 1;
  spec.context_len = 5;
  spec.page_size = 16;
  spec.page_table_stride = 6;
  spec.use_kv_dtype(kv_dtype);
  return spec;
}

TEST(SyntheticBatch, PoisonsExactlyTheRowsNoRequestSees) {
  for (DType kv : {DType::bf16, DType::fp16, DType::fp8_e4m3}) {
    const testing::SyntheticBatch batch(ragged_spec(kv));
    expect_poison_on_unseen_rows_only(batch, std::string(to_string(kv)));
  }
}

TEST(SyntheticBatch, AnotherLayerPoisonsTheFirstLayersUnseenRows) {
  const testing::SyntheticBatch first(ragged_spec(DType::fp8_e4m3));
  const testing::SyntheticBatch second = testing::another_layer(first, 1);
  ASSERT_EQ(second.page_table_, first.page_table_);
  expect_poison_on_unseen_rows_only(second, "second layer");
}

TEST(SyntheticBatch, PoisonCanBeLeftOut) {
  testing::BatchSpec spec = ragged_spec(DType::bf16);
  spec.poison_unused_kv = false;
  const testing::SyntheticBatch batch(spec);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(batch.pool_bytes() / 2); ++i) {
    ASSERT_TRUE(std::isfinite(load_as_float(batch.pool_.data(), DType::bf16, i))) << i;
  }
}

// The reference reads only what each row sees: the poisoned batch's outputs
// and statistics are bit-identical to those of the same batch with finite
// random values in the unseen rows.
TEST(SyntheticBatch, ReferenceOutputsDoNotDependOnUnseenRows) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    testing::BatchSpec spec = ragged_spec(kv);
    spec.stats = true;
    testing::SyntheticBatch poisoned(spec);
    testing::SyntheticBatch clean = poisoned;
    const std::int64_t width = spec.dims.head_dim();
    for (const auto& [first, end] : poisoned.unused_kv_rows()) {
      for (std::int64_t i = first * width; i < end * width; ++i) {
        store_from_float(clean.pool_.data(), kv, i, uniform(rng) * 8.0f);
      }
    }
    ASSERT_NO_THROW(validate(poisoned.problem()));
    reference_attention(poisoned.problem(), 2);
    reference_attention(clean.problem(), 2);
    EXPECT_EQ(poisoned.out_, clean.out_) << to_string(kv);
    ASSERT_EQ(poisoned.stats_.size(), clean.stats_.size());
    EXPECT_EQ(std::memcmp(poisoned.stats_.data(), clean.stats_.data(), clean.stats_.size() * sizeof(float)), 0);
    for (float v : poisoned.stats_) ASSERT_FALSE(std::isnan(v)) << to_string(kv);
  }
}

// Past a request's pages its row holds stale ids (other requests' pages,
// ids past the pool, negative ones); the reference reads none of them.
TEST(SyntheticBatch, StalePageIdsFillUnusedSlotsAndAreNeverRead) {
  testing::BatchSpec spec = ragged_spec(DType::bf16);
  spec.stats = true;
  testing::SyntheticBatch stale(spec);
  const std::int32_t stride = stale.page_table_stride_;
  testing::SyntheticBatch clean = stale;
  int in_pool = 0, past = 0, negative = 0;
  for (std::int32_t r = 0; r < static_cast<std::int32_t>(stale.kv_len_.size()); ++r) {
    const std::int32_t pages = (stale.kv_len_[r] + spec.page_size - 1) / spec.page_size;
    for (std::int32_t b = pages; b < stride; ++b) {
      const std::int32_t id = stale.page_table_[static_cast<std::size_t>(r * stride + b)];
      in_pool += id >= 0 && id < stale.num_pages() ? 1 : 0;
      past += id >= stale.num_pages() ? 1 : 0;
      negative += id < 0 ? 1 : 0;
      clean.page_table_[static_cast<std::size_t>(r * stride + b)] = -1;
    }
  }
  EXPECT_GT(in_pool, 0);
  EXPECT_GT(past, 0);
  EXPECT_GT(negative, 0);
  ASSERT_NO_THROW(validate(stale.problem()));
  reference_attention(stale.problem(), 2);
  reference_attention(clean.problem(), 2);
  EXPECT_EQ(stale.out_, clean.out_);
  EXPECT_EQ(std::memcmp(stale.stats_.data(), clean.stats_.data(), clean.stats_.size() * sizeof(float)), 0);
}

// A prefix cache's batch: later generations list the first one's leading
// pages, as many as both fill whole; the pages they gave up hold poison.
TEST(SyntheticBatch, SharedPrefixPagesAreTheFirstGenerationsWholePages) {
  testing::BatchSpec spec = ragged_spec(DType::bf16);
  spec.kv_len = {40, 64, 17, 90};  // whole pages of 16: 2, 4, 1, 5
  spec.generations = 4;
  spec.shared_prefix_pages = 3;
  testing::SyntheticBatch batch(spec);
  const std::int32_t stride = batch.page_table_stride_;
  const std::int32_t first = spec.contexts;
  auto page = [&](std::int32_t r, std::int32_t b) { return batch.page_table_[static_cast<std::size_t>(r * stride + b)]; };
  const std::int32_t shared[] = {0, 2, 1, 2};  // per generation, the first's two whole pages at most
  for (std::int32_t g = 1; g < 4; ++g) {
    const std::int32_t r = first + g;
    const std::int32_t pages = (batch.kv_len_[r] + 15) / 16;
    for (std::int32_t b = 0; b < pages; ++b) {
      if (b < shared[g]) {
        EXPECT_EQ(page(r, b), page(first, b)) << "generation " << g << " page " << b;
        continue;
      }
      for (std::int32_t o = 0; o < static_cast<std::int32_t>(batch.q_len_.size()); ++o) {
        const std::int32_t used = (batch.kv_len_[o] + 15) / 16;
        for (std::int32_t c = 0; c < used; ++c) {
          if (o != r) EXPECT_NE(page(o, c), page(r, b)) << "request " << r << " page " << b;
        }
      }
    }
  }
  // The context's and the first generation's rows are as without sharing.
  spec.shared_prefix_pages = 0;
  const testing::SyntheticBatch unshared(spec);
  for (std::int32_t r = 0; r <= first; ++r) {
    for (std::int32_t b = 0; b < stride; ++b) EXPECT_EQ(page(r, b), unshared.page_table_[static_cast<std::size_t>(r * stride + b)]);
  }
  expect_poison_on_unseen_rows_only(batch, "shared prefix");
  ASSERT_NO_THROW(validate(batch.problem()));
}

}  // namespace
}  // namespace helixmla

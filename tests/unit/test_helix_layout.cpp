// Helix ownership (DESIGN §5): pages round-robin over ranks, heads in
// contiguous integer-division ranges, and each rank's local page table,
// KV length and per-token bounds, checked against brute-force enumeration of
// global positions.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"
#include "helixmla/validate.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

constexpr std::int32_t kCps[] = {1, 2, 3, 4, 8};

// Local tokens of `rank` among global positions [0, count).
std::int64_t brute_owned(std::int64_t count, std::int32_t page_size, std::int32_t cp,
                         std::int32_t rank) {
  std::int64_t owned = 0;
  for (std::int64_t g = 0; g < count; ++g) owned += (g / page_size) % cp == rank ? 1 : 0;
  return owned;
}

std::vector<std::int32_t> sentinel_row(std::int32_t pages, std::int32_t base) {
  std::vector<std::int32_t> row(static_cast<std::size_t>(pages));
  std::iota(row.begin(), row.end(), base);
  return row;
}

TEST(HelixLayout, OwnedTokensMatchEnumeration) {
  for (std::int32_t cp : kCps) {
    for (std::int32_t page : {1, 3, 32, 64}) {
      for (std::int64_t n : {0, 1, 2, 31, 32, 33, 63, 64, 65, 100, 191, 192, 193, 257, 600}) {
        std::int64_t total = 0;
        for (std::int32_t r = 0; r < cp; ++r) {
          const std::int64_t owned = helix_owned_tokens(n, page, cp, r);
          EXPECT_EQ(owned, brute_owned(n, page, cp, r)) << "n " << n << " page " << page << " cp " << cp << " rank " << r;
          total += owned;
        }
        EXPECT_EQ(total, n);
      }
    }
  }
}

TEST(HelixLayout, RequestViewMatchesEnumeration) {
  for (std::int32_t cp : kCps) {
    for (std::int32_t page : {1, 4, 32, 64}) {
      for (std::int32_t q_len : {1, 2, 3, 4, 7}) {
        for (std::int32_t kv_len : {7, 31, 32, 33, 34, 64, 65, 66, 97, 130, 300}) {
          const std::int32_t pages = (kv_len + page - 1) / page;
          const std::vector<std::int32_t> row = sentinel_row(pages, 1000);
          std::vector<std::int64_t> bound_sum(static_cast<std::size_t>(q_len), 0);
          for (std::int32_t r = 0; r < cp; ++r) {
            const HelixRequestView v = helix_localize_request(kv_len, q_len, row, page, cp, r);
            std::vector<std::int32_t> expected_row;
            for (std::int32_t b = r; b < pages; b += cp) expected_row.push_back(1000 + b);
            EXPECT_EQ(v.page_row, expected_row);
            EXPECT_EQ(v.kv_len, brute_owned(kv_len, page, cp, r));
            ASSERT_EQ(v.token_bounds.size(), static_cast<std::size_t>(q_len));
            for (std::int32_t t = 0; t < q_len; ++t) {
              const std::int64_t position = kv_len - q_len + t;  // the token's own position
              EXPECT_EQ(v.token_bounds[t], brute_owned(position + 1, page, cp, r))
                  << "cp " << cp << " page " << page << " kv " << kv_len << " q " << q_len << " t " << t;
              EXPECT_LE(v.token_bounds[t], v.kv_len);
              bound_sum[static_cast<std::size_t>(t)] += v.token_bounds[t];
            }
          }
          for (std::int32_t t = 0; t < q_len; ++t) {
            EXPECT_EQ(bound_sum[static_cast<std::size_t>(t)], kv_len - q_len + 1 + t);
          }
        }
      }
    }
  }
}

TEST(HelixLayout, VerifyGroupStraddlingAPageBoundary) {
  // Positions 30..33 with 32-token pages: page 0 on rank 0, page 1 on rank 1.
  const std::vector<std::int32_t> row = {7, 9};
  const HelixRequestView r0 = helix_localize_request(34, 4, row, 32, 2, 0);
  const HelixRequestView r1 = helix_localize_request(34, 4, row, 32, 2, 1);
  EXPECT_EQ(r0.kv_len, 32);
  EXPECT_EQ(r0.page_row, std::vector<std::int32_t>({7}));
  EXPECT_EQ(r0.token_bounds, std::vector<std::int32_t>({31, 32, 32, 32}));
  EXPECT_EQ(r1.kv_len, 2);
  EXPECT_EQ(r1.page_row, std::vector<std::int32_t>({9}));
  EXPECT_EQ(r1.token_bounds, std::vector<std::int32_t>({0, 0, 1, 2}));
}

TEST(HelixLayout, RanksWithoutKvSeeNothing) {
  const std::vector<std::int32_t> row = {5};
  for (std::int32_t r = 1; r < 4; ++r) {
    const HelixRequestView v = helix_localize_request(5, 3, row, 64, 4, r);
    EXPECT_EQ(v.kv_len, 0);
    EXPECT_TRUE(v.page_row.empty());
    EXPECT_EQ(v.token_bounds, std::vector<std::int32_t>({0, 0, 0}));
  }
  const HelixRequestView owner = helix_localize_request(5, 3, row, 64, 4, 0);
  EXPECT_EQ(owner.token_bounds, std::vector<std::int32_t>({3, 4, 5}));
}

TEST(HelixLayout, HeadsSplitByIntegerDivision) {
  for (std::int32_t cp : kCps) {
    for (std::int32_t heads : {1, 5, 7, 16, 24, 48, 96, 128}) {
      std::int32_t next = 0;
      for (std::int32_t r = 0; r < cp; ++r) {
        const HeadRange h = helix_heads_of_rank(heads, cp, r);
        EXPECT_EQ(h.begin, next);
        EXPECT_EQ(h.begin, r * heads / cp);
        EXPECT_TRUE(h.count == heads / cp || h.count == heads / cp + 1) << heads << "/" << cp;
        next = h.end();
      }
      EXPECT_EQ(next, heads);
    }
  }
  EXPECT_EQ(helix_heads_of_rank(7, 3, 2).begin, 4);
  EXPECT_EQ(helix_heads_of_rank(7, 3, 2).count, 3);
}

TEST(HelixLayout, BatchMetadataForEachRank) {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 4;
  spec.contexts = 2;
  spec.context_len = 40;
  spec.generations = 3;
  spec.q_len = 3;
  spec.kv_len = {34, 5, 97};
  spec.page_size = 32;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  const Problem global = batch.problem();
  for (std::int32_t cp : kCps) {
    for (std::int32_t r = 0; r < cp; ++r) {
      const HelixLocalMetadata local = helix_localize(global, cp, r);
      EXPECT_EQ(local.cp_size, cp);
      EXPECT_EQ(local.cp_rank, r);
      EXPECT_EQ(local.q_len, batch.q_len_);
      ASSERT_EQ(local.kv_len.size(), batch.kv_len_.size());
      std::size_t widest = 1;
      std::vector<std::int32_t> bounds;
      for (std::size_t i = 0; i < batch.kv_len_.size(); ++i) {
        const auto row = std::span<const std::int32_t>(batch.page_table_).subspan(
            i * batch.page_table_stride_, batch.page_table_stride_);
        const HelixRequestView v =
            helix_localize_request(batch.kv_len_[i], batch.q_len_[i], row, spec.page_size, cp, r);
        EXPECT_EQ(local.kv_len[i], v.kv_len);
        widest = std::max(widest, v.page_row.size());
        bounds.insert(bounds.end(), v.token_bounds.begin(), v.token_bounds.end());
      }
      ASSERT_EQ(local.page_table_stride, static_cast<std::int32_t>(widest));
      ASSERT_EQ(local.page_table.size(), batch.kv_len_.size() * widest);
      for (std::size_t i = 0; i < batch.kv_len_.size(); ++i) {
        const auto row = std::span<const std::int32_t>(batch.page_table_).subspan(
            i * batch.page_table_stride_, batch.page_table_stride_);
        const HelixRequestView v =
            helix_localize_request(batch.kv_len_[i], batch.q_len_[i], row, spec.page_size, cp, r);
        for (std::size_t j = 0; j < widest; ++j) {
          const std::int32_t expected = j < v.page_row.size() ? v.page_row[j] : -1;
          EXPECT_EQ(local.page_table[i * widest + j], expected) << "request " << i << " slot " << j;
        }
      }
      EXPECT_EQ(local.token_kv_bounds, bounds);

      std::vector<std::byte> partial(batch.out_bytes());
      std::vector<float> stats(static_cast<std::size_t>(batch.num_tokens() * spec.heads * 2));
      const Problem p = helix_local_problem(global, local, partial.data(), stats.data());
      EXPECT_NO_THROW(validate(p)) << "cp " << cp << " rank " << r;
      EXPECT_EQ(p.helix.cp_size, cp);
      EXPECT_EQ(p.helix.token_kv_bounds.size(), static_cast<std::size_t>(batch.num_tokens()));
      EXPECT_EQ(p.stats.heads, spec.heads);
      EXPECT_EQ(p.out, partial.data());
    }
  }
}

TEST(HelixLayout, RejectsBadInput) {
  const std::vector<std::int32_t> row = {1, 2};
  try {
    helix_localize_request(40, 1, row, 32, 2, 2);
    FAIL() << "rank 2 of 2 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "cp_rank");
    EXPECT_EQ(e.value(), "2");
  }
  try {
    helix_localize_request(100, 1, row, 32, 2, 0);
    FAIL() << "a row of 2 pages accepted for 100 tokens";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "page_table_stride");
  }
  EXPECT_THROW(helix_localize_request(40, 1, row, 0, 2, 0), InvalidArgument);
  EXPECT_THROW(helix_heads_of_rank(16, 0, 0), InvalidArgument);

  testing::BatchSpec spec;
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  Problem split = batch.problem();
  split.helix.cp_size = 2;
  try {
    helix_localize(split, 2, 0);
    FAIL() << "an already split batch accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "helix.cp_size");
  }
  split.helix.cp_size = 1;
  const std::vector<std::int32_t> bounds(static_cast<std::size_t>(split.num_tokens()), 1);
  split.helix.token_kv_bounds = bounds;
  try {
    helix_localize(split, 2, 0);
    FAIL() << "a batch with Helix bounds accepted as a global one";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "helix.token_kv_bounds");
  }

  // A request's bad length is named with its index in the batch.
  Problem global = batch.problem();
  std::vector<std::int32_t> kv_len(global.kv_len.begin(), global.kv_len.end());
  ASSERT_GE(kv_len.size(), 2u);
  kv_len[1] = -5;
  global.kv_len = kv_len;
  try {
    helix_localize(global, 2, 0);
    FAIL() << "kv_len -5 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "kv_len");
    EXPECT_EQ(e.index(), 1);
    EXPECT_EQ(e.value(), "-5");
  }
}

TEST(HelixLayout, AppendRowsGoToTheOwningRankOnly) {
  const std::vector<std::int32_t> q_len = {3, 1, 4};
  const std::vector<std::int32_t> kv_len = {34, 1, 66};
  const std::int32_t page = 32, stride = 3;
  const std::vector<std::int32_t> table = {10, 11, -1, 12, -1, -1, 13, 14, 15};
  for (std::int32_t cp : kCps) {
    std::vector<int> writers(8, 0);
    for (std::int32_t r = 0; r < cp; ++r) {
      const auto rows = helix_kv_append_rows(q_len, kv_len, table, stride, page, 16, cp, r);
      ASSERT_EQ(rows.size(), 8u);
      std::size_t token = 0;
      for (std::size_t i = 0; i < q_len.size(); ++i) {
        for (std::int32_t t = 0; t < q_len[i]; ++t, ++token) {
          const std::int64_t position = kv_len[i] - q_len[i] + t;
          const std::int64_t b = position / page;
          if (b % cp == r) {
            EXPECT_EQ(rows[token], std::int64_t{table[i * stride + b]} * page + position % page);
            ++writers[token];
          } else {
            EXPECT_EQ(rows[token], -1);
          }
        }
      }
    }
    for (int w : writers) EXPECT_EQ(w, 1) << "cp " << cp;
  }
  const std::vector<std::int32_t> negative_kv = {34, -1, 66};
  try {
    helix_kv_append_rows(q_len, negative_kv, table, stride, page, 16, 2, 1);
    FAIL() << "kv_len -1 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "kv_len");
    EXPECT_EQ(e.index(), 1);
    EXPECT_EQ(e.value(), "-1");
  }
  const std::vector<std::int32_t> bad_table = {10, 99, -1, 12, -1, -1, 13, 14, 15};
  try {
    helix_kv_append_rows(q_len, kv_len, bad_table, stride, page, 16, 2, 1);
    FAIL() << "page 99 of a 16-page pool accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "page_table");
    EXPECT_EQ(e.index(), 1);
    EXPECT_EQ(e.value(), "99");
  }
}

}  // namespace
}  // namespace helixmla

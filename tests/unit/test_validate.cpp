// One test per rule of the batch model: each asserts the field the error
// names (and the index and value where they say something).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <cstdint>
#include <limits>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/validate.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();

// A valid mixed batch: one context (20 tokens) then three generations with
// q_len 2 and kv_len 40, 50, 70 in 16-token pages (page-table stride 5).
class Validate : public ::testing::Test {
 protected:
  Validate() : batch_(spec()) {
    q_len_ = batch_.q_len_;
    kv_len_ = batch_.kv_len_;
    page_table_ = batch_.page_table_;
    p_ = batch_.problem();
    bind();
  }

  static testing::BatchSpec spec() {
    testing::BatchSpec s;
    s.dims = {64, 16};
    s.heads = 4;
    s.contexts = 1;
    s.context_len = 20;
    s.generations = 3;
    s.q_len = 2;
    s.kv_len = {40, 50, 70};
    s.page_size = 16;
    s.stats = true;
    return s;
  }

  // Points the problem at the test's own (mutable) metadata.
  void bind() {
    p_.q_len = q_len_;
    p_.kv_len = kv_len_;
    p_.page_table = page_table_;
    p_.helix.token_kv_bounds = bounds_;
  }

  // Bounds that are valid for the batch: every token sees its ordinary prefix.
  void use_ordinary_bounds() {
    bounds_.clear();
    for (std::size_t r = 0; r < q_len_.size(); ++r) {
      for (std::int32_t t = 0; t < q_len_[r]; ++t) {
        bounds_.push_back(static_cast<std::int32_t>(visible_kv(kv_len_[r], q_len_[r], t)));
      }
    }
    bind();
  }

  InvalidArgument rejection() {
    bind();
    try {
      validate(p_);
    } catch (const InvalidArgument& e) {
      return e;
    }
    ADD_FAILURE() << "the problem was accepted";
    return InvalidArgument("<accepted>", -2, "", "");
  }

  testing::SyntheticBatch batch_;
  Problem p_;
  std::vector<std::int32_t> q_len_, kv_len_, page_table_, bounds_;
};

TEST_F(Validate, ValidMixedBatchPasses) {
  EXPECT_NO_THROW(validate(p_));
  // The synthetic batch leaves stale ids in unused page-table slots, some
  // past the pool and some negative; they are ignored.
  EXPECT_NE(std::find_if(page_table_.begin(), page_table_.end(), [&](std::int32_t id) { return id >= p_.kv.num_pages; }),
            page_table_.end());
  EXPECT_NE(std::find_if(page_table_.begin(), page_table_.end(), [](std::int32_t id) { return id < 0; }),
            page_table_.end());
}

TEST_F(Validate, ValidHelixBatchPasses) {
  use_ordinary_bounds();
  p_.helix.cp_size = 2;
  p_.helix.cp_rank = 1;
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, ReadsOnlyMetadataNeverTensors) {
  // Addresses that would fault if dereferenced.
  p_.q = reinterpret_cast<const void*>(std::uintptr_t{16});
  p_.out = reinterpret_cast<void*>(std::uintptr_t{32});
  p_.kv.pool = reinterpret_cast<const void*>(std::uintptr_t{48});
  p_.stats.data = reinterpret_cast<float*>(std::uintptr_t{64});
  p_.location = Location::cuda(0);
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, EmptyBatch) {
  q_len_.clear();
  kv_len_.clear();
  page_table_.clear();
  p_.num_contexts = 0;
  EXPECT_EQ(rejection().field(), "q_len");
}

TEST_F(Validate, HeadCountOutOfRange) {
  p_.num_heads = 0;
  EXPECT_EQ(rejection().field(), "num_heads");
  p_.num_heads = 129;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "num_heads");
  EXPECT_EQ(e.index(), -1);
  EXPECT_EQ(e.value(), "129");
  p_.num_heads = 128;
  p_.stats.heads = 128;
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, KvLoraRankOutOfRange) {
  for (std::int32_t rank : {0, 8, 24, 2064, -16}) {
    p_.dims.kv_lora_rank = rank;
    const InvalidArgument e = rejection();
    EXPECT_EQ(e.field(), "dims.kv_lora_rank") << rank;
    EXPECT_EQ(e.value(), std::to_string(rank));
  }
}

TEST_F(Validate, RopeDimOutOfRange) {
  for (std::int32_t rope : {-16, 8, 40, 272}) {
    p_.dims.rope_dim = rope;
    EXPECT_EQ(rejection().field(), "dims.rope_dim") << rope;
  }
  p_.dims.rope_dim = 0;
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, SoftmaxScaleMustBeFinitePositive) {
  for (float scale : {0.0f, -0.1f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    p_.softmax_scale = scale;
    EXPECT_EQ(rejection().field(), "softmax_scale") << scale;
  }
}

TEST_F(Validate, PageSizeAtLeastOne) {
  p_.kv.page_size = 0;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv.page_size");
  EXPECT_EQ(e.value(), "0");
}

TEST_F(Validate, PoolNeedsPages) {
  p_.kv.num_pages = 0;
  EXPECT_EQ(rejection().field(), "kv.num_pages");
}

TEST_F(Validate, QueryDtypeMustBeHalf) {
  p_.q_dtype = DType::fp8_e4m3;
  EXPECT_EQ(rejection().field(), "q_dtype");
  p_.q_dtype = DType::fp32;
  EXPECT_EQ(rejection().value(), "fp32");
}

TEST_F(Validate, OutputDtypeMustBeHalfAndEqualQuery) {
  p_.out_dtype = DType::fp32;
  EXPECT_EQ(rejection().field(), "out_dtype");
  p_.out_dtype = DType::fp16;  // q is bf16
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "out_dtype");
  EXPECT_EQ(e.value(), "fp16");
}

TEST_F(Validate, KvDtypeSupported) {
  p_.kv.dtype = DType::fp32;
  EXPECT_EQ(rejection().field(), "kv.dtype");
}

TEST_F(Validate, HalfKvMustMatchQueryDtype) {
  p_.kv.dtype = DType::fp16;  // q is bf16
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv.dtype");
  EXPECT_NE(e.rule().find("unsupported combination"), std::string::npos);
}

TEST_F(Validate, Fp8KvWorksWithEitherQueryDtype) {
  p_.kv.dtype = DType::fp8_e4m3;
  EXPECT_NO_THROW(validate(p_));
  p_.q_dtype = p_.out_dtype = DType::fp16;
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, KvScaleFinitePositive) {
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    p_.kv.scale = scale;
    EXPECT_EQ(rejection().field(), "kv.scale") << scale;
  }
}

TEST_F(Validate, NullTensors) {
  const Problem good = p_;
  p_.q = nullptr;
  EXPECT_EQ(rejection().field(), "q");
  p_ = good;
  p_.out = nullptr;
  EXPECT_EQ(rejection().field(), "out");
  p_ = good;
  p_.kv.pool = nullptr;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv.pool");
  EXPECT_EQ(e.value(), "null");
}

TEST_F(Validate, NumContextsInRange) {
  p_.num_contexts = -1;
  EXPECT_EQ(rejection().field(), "num_contexts");
  p_.num_contexts = 5;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "num_contexts");
  EXPECT_EQ(e.value(), "5");
}

TEST_F(Validate, KvLenCountMatchesQLen) {
  kv_len_.pop_back();
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv_len");
  EXPECT_EQ(e.value(), "3");
}

TEST_F(Validate, EveryRequestHasNewTokens) {
  q_len_[0] = 0;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "q_len");
  EXPECT_EQ(e.index(), 0);
  EXPECT_EQ(e.value(), "0");
}

TEST_F(Validate, KvLenNonNegative) {
  kv_len_[3] = -5;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv_len");
  EXPECT_EQ(e.index(), 3);
  EXPECT_EQ(e.value(), "-5");
}

TEST_F(Validate, GenerationsShareQLen) {
  q_len_[3] = 3;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "q_len");
  EXPECT_EQ(e.index(), 3);
  EXPECT_EQ(e.value(), "3");
}

TEST_F(Validate, ContextsMayHaveOtherQLens) {
  q_len_[0] = 7;  // a chunk of prefill with a cached prefix
  p_.stats.tokens = 13;
  bind();
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, QLenNotAboveKvLen) {
  kv_len_[2] = 1;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "q_len");
  EXPECT_EQ(e.index(), 2);
  EXPECT_EQ(e.value(), "2");
}

TEST_F(Validate, HelixBoundsAllowShortLocalKv) {
  kv_len_[2] = 1;  // this rank holds one of the request's tokens
  use_ordinary_bounds();
  p_.helix.cp_size = 2;
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, PageTableSizeMatchesStride) {
  page_table_.push_back(0);
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "page_table");
  EXPECT_EQ(e.index(), -1);
  EXPECT_EQ(e.value(), std::to_string(4 * 5 + 1));
}

TEST_F(Validate, NegativeStride) {
  p_.page_table_stride = -1;
  EXPECT_EQ(rejection().field(), "page_table_stride");
}

TEST_F(Validate, KvLenFitsItsPages) {
  kv_len_[2] = 5 * 16 + 1;  // one token more than a row of five 16-token pages holds
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv_len");
  EXPECT_EQ(e.index(), 2);
  EXPECT_EQ(e.value(), "81");
  EXPECT_NE(e.rule().find("kv_len > pages * page_size"), std::string::npos);
}

// A row with several bad ids names its first one (rows are checked as a
// whole first, then searched).
TEST_F(Validate, TheFirstBadPageIdOfARowIsNamed) {
  const std::int32_t stride = p_.page_table_stride;
  page_table_[3 * stride + 3] = static_cast<std::int32_t>(p_.kv.num_pages) + 7;
  page_table_[3 * stride + 1] = -2;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "page_table");
  EXPECT_EQ(e.index(), 3 * stride + 1);
  EXPECT_EQ(e.value(), "-2");
}

TEST_F(Validate, UsedPageIdsInThePool) {
  const std::int32_t stride = p_.page_table_stride;
  page_table_[1 * stride + 2] = static_cast<std::int32_t>(p_.kv.num_pages);
  InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "page_table");
  EXPECT_EQ(e.index(), 1 * stride + 2);
  EXPECT_EQ(e.value(), std::to_string(p_.kv.num_pages));

  page_table_ = batch_.page_table_;
  page_table_[3 * stride] = -1;
  e = rejection();
  EXPECT_EQ(e.field(), "page_table");
  EXPECT_EQ(e.index(), 3 * stride);
  EXPECT_EQ(e.value(), "-1");
}

TEST_F(Validate, UnusedPageSlotsAreIgnored) {
  const std::int32_t stride = p_.page_table_stride;
  // Request 1 (kv_len 40) uses three pages; slots 3 and 4 are not read.
  page_table_[1 * stride + 3] = -7;
  page_table_[1 * stride + 4] = 1 << 30;
  bind();
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, TotalTokensFitInt32) {
  q_len_ = {kInt32Max, kInt32Max};
  kv_len_ = {kInt32Max, kInt32Max};
  p_.num_contexts = 0;
  p_.kv.page_size = 1 << 20;
  p_.page_table_stride = 2048;
  page_table_.assign(2 * 2048, 0);
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "q_len");
  EXPECT_EQ(e.value(), std::to_string(2 * std::int64_t{kInt32Max}));
}

TEST_F(Validate, PageRowSpanFitsInt32) {
  p_.kv.page_size = 1 << 16;
  p_.page_table_stride = 1 << 16;
  page_table_.assign(4 * (std::size_t{1} << 16), 0);
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "page_table_stride");
}

TEST_F(Validate, PoolSizeFitsInt64) {
  p_.kv.num_pages = std::int64_t{1} << 56;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "kv.num_pages");
  EXPECT_EQ(e.value(), std::to_string(std::int64_t{1} << 56));
}

TEST_F(Validate, StatsShape) {
  const Problem good = p_;
  p_.stats.dtype = DType::bf16;
  EXPECT_EQ(rejection().field(), "stats.dtype");
  p_ = good;
  p_.stats.tokens = 25;
  InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "stats.tokens");
  EXPECT_EQ(e.value(), "25");
  p_ = good;
  p_.stats.heads = 8;
  EXPECT_EQ(rejection().field(), "stats.heads");
  p_ = good;
  p_.stats.width = 1;
  e = rejection();
  EXPECT_EQ(e.field(), "stats.width");
  EXPECT_EQ(e.value(), "1");
}

TEST_F(Validate, AbsentStatsShapeIsNotChecked) {
  p_.stats = StatsBuffer{};
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, HelixCpSizeAndRank) {
  p_.helix.cp_size = 0;
  EXPECT_EQ(rejection().field(), "helix.cp_size");
  p_.helix.cp_size = 2;
  p_.helix.cp_rank = 2;
  InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "helix.cp_rank");
  EXPECT_EQ(e.value(), "2");
  p_.helix.cp_rank = -1;
  EXPECT_EQ(rejection().field(), "helix.cp_rank");
}

TEST_F(Validate, HelixBoundsOnePerToken) {
  use_ordinary_bounds();
  bounds_.pop_back();
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "helix.token_kv_bounds");
  EXPECT_EQ(e.index(), -1);
  EXPECT_EQ(e.value(), "25");
}

TEST_F(Validate, HelixBoundsWithinTheRequestsKv) {
  use_ordinary_bounds();
  bounds_[22] = 51;  // token 22 is the first of request 2 (kv_len 50)
  InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "helix.token_kv_bounds");
  EXPECT_EQ(e.index(), 22);
  EXPECT_EQ(e.value(), "51");
  use_ordinary_bounds();
  bounds_[5] = -1;
  e = rejection();
  EXPECT_EQ(e.index(), 5);
  EXPECT_EQ(e.value(), "-1");
}

TEST_F(Validate, HelixBoundsNonDecreasingWithinARequest) {
  use_ordinary_bounds();
  bounds_[21] = bounds_[20] - 1;  // tokens 20, 21 are request 1's verify group
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "helix.token_kv_bounds");
  EXPECT_EQ(e.index(), 21);
  use_ordinary_bounds();
  bounds_[22] = 0;  // a new request may start lower
  bind();
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, HelixNeedsStats) {
  p_.stats = StatsBuffer{};
  p_.helix.cp_size = 2;
  EXPECT_EQ(rejection().field(), "stats.data");
  p_.helix.cp_size = 1;
  use_ordinary_bounds();
  EXPECT_EQ(rejection().field(), "stats.data");
}

// A rank's verify groups need their bounds: the local mask differs per
// token where a group straddles pages of several ranks. Single tokens see
// their whole local KV, which the plain mask gives.
TEST_F(Validate, HelixVerifyGroupsNeedBounds) {
  p_.helix.cp_size = 2;
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "helix.token_kv_bounds");
  EXPECT_NE(std::string(e.what()).find("q_len > 1"), std::string::npos) << e.what();
  std::fill(q_len_.begin(), q_len_.end(), 1);
  bind();
  p_.stats.tokens = p_.num_tokens();
  EXPECT_NO_THROW(validate(p_));
}

// A rank holding none of a request's pages yet has local kv_len 0 (helix.hpp);
// its single token then sees nothing, which the plain mask gives. Outside
// Helix the new token is part of the KV, so kv_len 0 cannot hold it.
TEST_F(Validate, HelixRankMayHoldNoneOfARequestYet) {
  std::fill(q_len_.begin(), q_len_.end(), 1);
  kv_len_[2] = 0;
  bind();
  p_.stats.tokens = p_.num_tokens();
  const InvalidArgument e = rejection();
  EXPECT_EQ(e.field(), "q_len");
  EXPECT_EQ(e.index(), 2);
  p_.helix.cp_size = 2;
  EXPECT_NO_THROW(validate(p_));
}

TEST_F(Validate, ReportsTheFirstViolatedRule) {
  p_.num_heads = 0;
  page_table_[0] = -1;
  p_.kv.scale = 0.0f;
  EXPECT_EQ(rejection().field(), "num_heads");
}

TEST_F(Validate, MessageNamesFieldIndexAndValue) {
  kv_len_[3] = -5;
  const std::string message = rejection().what();
  EXPECT_NE(message.find("kv_len[3]"), std::string::npos) << message;
  EXPECT_NE(message.find("-5"), std::string::npos) << message;
}

}  // namespace
}  // namespace helixmla

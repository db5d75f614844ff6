// The tensor-core backend's capability answers (pure functions of shape and
// environment, as the selector and sweeps use them without a GPU) and its
// work plan (rows, KV ranges and split entries the kernel and combine use).
#if defined(HELIXMLA_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "cuda/block_schedule.hpp"
#include "cuda/tensorcore_backend.hpp"
#include "cuda/tensorcore_kernel.cuh"
#include "cuda/tensorcore_plan.hpp"
#include "cuda/tensorcore_variants.hpp"
#include "helixmla/error.hpp"
#include "support/plan_checks.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::cuda {
namespace {

Environment hopper(bool nvrtc) {
  Environment env;
  env.arch = Arch::sm90;
  env.device_count = 1;
  env.sm_count = 132;
  env.nvrtc = nvrtc;
  env.built_backends = {"cpu", "cuda_generic", "cuda_tensorcore"};
  return env;
}

PhaseShape decode_shape(std::int32_t heads, std::int32_t page, DType kv = DType::bf16,
                        std::int32_t q_len = 1) {
  PhaseShape s;
  s.num_heads = heads;
  s.page_size = page;
  s.kv_dtype = kv;
  s.q_len = q_len;
  s.max_q_len = q_len;
  s.on_device = true;
  return s;
}

// The variant the catalog picks for H heads x q_len at page 64 and a batch bucket.
TensorcoreVariant variant(std::int32_t heads, std::int32_t q_len, DType kv, std::int32_t batch) {
  PhaseShape s = decode_shape(heads, 64, kv, q_len);
  s.batch_bucket = batch;
  return tensorcore_variant_for(s);
}

TEST(TensorcoreCatalog, AvailableOnlyOnHopperBuilds) {
  const BackendPtr b = make_tensorcore_backend();
  EXPECT_EQ(b->name(), "cuda_tensorcore");
  EXPECT_EQ(b->priority(), 90);
  EXPECT_TRUE(b->available(hopper(true)));
  Environment a100 = hopper(true);
  a100.arch = Arch::sm80;
  EXPECT_FALSE(b->available(a100));
  EXPECT_NE(b->available(a100).reason.find("sm80"), std::string::npos);
  Environment cpu_only;
  cpu_only.built_backends = {"cpu"};
  EXPECT_FALSE(b->available(cpu_only));
}

TEST(TensorcoreCatalog, PrecompiledPagesNeedNoNvrtc) {
  const BackendPtr b = make_tensorcore_backend();
  for (std::int32_t page : kTensorcorePrecompiledPages) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      KernelVariant chosen;
      const Verdict v = b->catalog().can_implement(decode_shape(48, page, kv), hopper(false), &chosen);
      EXPECT_TRUE(v) << page << " " << v.reason;
      EXPECT_TRUE(chosen.precompiled);
      // 48 heads: the 48-row fp8-steps tile where it is on, else 64 rows.
      const bool wide = kv == DType::fp8_e4m3 && tensorcore_48_row_tiles_enabled();
      const TensorcoreVariant expected{.rows = wide ? 48 : 64, .page_size = page, .kv_dtype = kv,
                                       .engine = wide ? TensorcoreEngine::fp8_steps : tensorcore_default_engine(64)};
      EXPECT_EQ(chosen.name, expected.name());
    }
  }
}

TEST(TensorcoreCatalog, OtherPagesAreJustInTimeOrRefusedWithReason) {
  const BackendPtr b = make_tensorcore_backend();
  for (std::int32_t page : {1, 3, 48, 96, 256}) {
    KernelVariant chosen;
    EXPECT_TRUE(b->catalog().can_implement(decode_shape(16, page), hopper(true), &chosen));
    EXPECT_FALSE(chosen.precompiled);
    const Verdict no = b->catalog().can_implement(decode_shape(16, page), hopper(false));
    EXPECT_FALSE(no);
    EXPECT_EQ(no.reason, "page size " + std::to_string(page) +
                             " needs a just-in-time kernel and NVRTC is unavailable");
  }
}

TEST(TensorcoreCatalog, InventoryListsWhatCanImplementNames) {
  const BackendPtr b = make_tensorcore_backend();
  std::set<std::string> precompiled;
  for (const KernelVariant& v : b->catalog().inventory(hopper(false))) {
    EXPECT_TRUE(v.precompiled) << v.name;
    precompiled.insert(v.name);
  }
  // 3 row tiles x 2 KV types x 4 pages, 32-row fp8 twice, 64-row 16-bit KV
  // twice (seesaw), 16-row fp8 twice (fp8 steps), 48-row fp8 (fp8 steps alone)
  EXPECT_EQ(precompiled.size(), 40u);
  for (std::int32_t heads : {1, 16, 24, 48, 64, 96, 128}) {
    for (std::int32_t q_len : {1, 2, 4, 16}) {
      for (const DType kv : {DType::bf16, DType::fp8_e4m3}) {
        for (const std::int32_t batch : {1, 16, 64, 128}) {
          PhaseShape s = decode_shape(heads, 64, kv, q_len);
          s.batch_bucket = batch;
          KernelVariant chosen;
          ASSERT_TRUE(b->catalog().can_implement(s, hopper(false), &chosen));
          EXPECT_TRUE(precompiled.count(chosen.name)) << chosen.name;
        }
      }
    }
  }
  EXPECT_GT(b->catalog().inventory(hopper(true)).size(), precompiled.size());
}

TEST(TensorcoreCatalog, ChecksNameWhatIsOutsideTheKernel) {
  const BackendPtr b = make_tensorcore_backend();
  PhaseShape s = decode_shape(16, 64);
  EXPECT_TRUE(b->check(s));
  PhaseShape host = s;
  host.on_device = false;
  EXPECT_FALSE(b->check(host));
  PhaseShape dims = s;
  dims.dims.kv_lora_rank = 256;
  EXPECT_FALSE(b->check(dims));
  PhaseShape mixed = s;
  mixed.kv_dtype = DType::fp16;
  EXPECT_FALSE(b->check(mixed));
  PhaseShape fp16 = s;
  fp16.q_dtype = fp16.out_dtype = fp16.kv_dtype = DType::fp16;
  EXPECT_TRUE(b->check(fp16));
  EXPECT_FALSE(b->catalog().can_implement(fp16, hopper(false)));
  EXPECT_TRUE(b->catalog().can_implement(fp16, hopper(true)));
  PhaseShape long_verify = s;
  long_verify.q_len = 17;
  EXPECT_FALSE(b->check(long_verify));
  PhaseShape tree = s;
  tree.mask = MaskKind::tree;
  EXPECT_FALSE(b->check(tree));
  PhaseShape stats = s;
  stats.has_stats = true;
  stats.stats_fp32_contiguous = false;
  EXPECT_FALSE(b->check(stats));
  PhaseShape context = s;
  context.phase = PhaseKind::context;
  context.q_len = 0;
  context.max_q_len = 512;
  EXPECT_TRUE(b->check(context));
  EXPECT_EQ(tensorcore_variant_for(context).rows, 64);
  // Past 2^30 tokens the bucket is capped, not wrapped, so the int32 row
  // count is still refused.
  PhaseShape huge = context;
  huge.num_heads = 2;
  huge.max_q_len = max_q_len_bucket_of((std::int64_t{1} << 30) + 1);
  EXPECT_FALSE(b->check(huge));
}

TEST(TensorcoreCatalog, RowTileFollowsRowsPerRequest) {
  for (const DType kv : {DType::bf16, DType::fp16, DType::fp8_e4m3}) {
    for (const std::int32_t batch : {1, kWgmmaFor32RowsFromBatch / 2}) {
      EXPECT_EQ(tensorcore_row_tile(1, 1, kv, batch), 16);
      EXPECT_EQ(tensorcore_row_tile(16, 1, kv, batch), 16);
      EXPECT_EQ(tensorcore_row_tile(24, 1, kv, batch), 32);
      EXPECT_EQ(tensorcore_row_tile(16, 2, kv, batch), 32);
      EXPECT_EQ(tensorcore_row_tile(48, 1, kv, batch),
                kv == DType::fp8_e4m3 && tensorcore_48_row_tiles_enabled() ? 48 : 64);
      EXPECT_EQ(tensorcore_row_tile(49, 1, kv, batch), 64);
      EXPECT_EQ(tensorcore_row_tile(128, 16, kv, batch), 64);
      EXPECT_EQ(tensorcore_row_tile(8, 0, kv, batch), 64);
    }
  }
}

TEST(TensorcoreCatalog, ThirtyTwoRowsOfSixteenBitKvRunPaddedOnWgmmaInBigBatches) {
  const std::int32_t big = kWgmmaFor32RowsFromBatch;
  const std::int32_t padded = kTensorcoreWgmmaFor64Rows ? 64 : 32;
  EXPECT_EQ(tensorcore_row_tile(16, 2, DType::bf16, big), padded);
  EXPECT_EQ(tensorcore_row_tile(32, 1, DType::fp16, 4 * big), padded);
  EXPECT_EQ(tensorcore_row_tile(32, 1, DType::bf16, big / 2), 32);
  EXPECT_EQ(tensorcore_row_tile(16, 2, DType::fp8_e4m3, big), 32);
  EXPECT_EQ(tensorcore_row_tile(16, 1, DType::bf16, big), 16);  // 16 rows stay on their own tile
  PhaseShape s = decode_shape(32, 64);
  s.batch_bucket = big;
  const TensorcoreVariant v = tensorcore_variant_for(s);
  EXPECT_EQ(v.rows, padded);
  EXPECT_EQ(v.engine == TensorcoreEngine::wgmma || v.engine == TensorcoreEngine::seesaw, kTensorcoreWgmmaFor64Rows);
}

TEST(TensorcoreCatalog, ThirtyTwoFp8RowsRunTheTwoBlockBuildInBigBatches) {
  const std::int32_t big = kTwoBlocks32RowFp8FromBatch;
  for (const auto& [heads, q_len] : {std::pair{16, 2}, std::pair{24, 1}, std::pair{32, 1}}) {
    const TensorcoreVariant small = tensorcore_variant(heads, q_len, 64, DType::bf16, DType::fp8_e4m3, big / 2);
    const TensorcoreVariant large = tensorcore_variant(heads, q_len, 64, DType::bf16, DType::fp8_e4m3, big);
    EXPECT_EQ(small.rows, 32);
    EXPECT_FALSE(small.two_blocks);
    EXPECT_EQ(large.rows, 32);
    EXPECT_TRUE(large.two_blocks);
    EXPECT_EQ(large.name(), "tc_m32_p64_bf16_fp8_2blocks");
    EXPECT_EQ(large.blocks_per_sm(), 2);
    EXPECT_EQ(small.blocks_per_sm(), 1);
    // Two blocks must fit an SM's shared memory (228 KB, 1 KB reserved per block).
    EXPECT_LE(2 * (large.smem_bytes() + 1024), 228 * 1024);
    EXPECT_TRUE(large.precompiled());
  }
  // Every other row tile and KV type keeps its one build whatever the batch.
  for (const DType kv : {DType::bf16, DType::fp16, DType::fp8_e4m3}) {
    for (const auto& [heads, q_len] : {std::pair{16, 1}, std::pair{48, 1}, std::pair{128, 2}, std::pair{16, 2}}) {
      const TensorcoreVariant v = tensorcore_variant(heads, q_len, 64, DType::bf16, kv, 4 * big);
      EXPECT_EQ(v.two_blocks, v.rows == 32 && kv == DType::fp8_e4m3) << heads << "x" << q_len;
    }
  }
  PhaseShape s = decode_shape(24, 16, DType::fp8_e4m3);
  s.batch_bucket = big;
  EXPECT_TRUE(tensorcore_variant_for(s).two_blocks);
  s.batch_bucket = big / 2;
  EXPECT_FALSE(tensorcore_variant_for(s).two_blocks);
}

TEST(TensorcoreCatalog, BlockSlotsFollowTheBuild) {
  const TensorcoreVariant one = tensorcore_variant(24, 1, 64, DType::bf16, DType::fp8_e4m3, 1);
  const TensorcoreVariant two = tensorcore_variant(24, 1, 64, DType::bf16, DType::fp8_e4m3, 128);
  EXPECT_EQ(tensorcore_block_slots(132, one), 132 * one.blocks_per_sm());
  EXPECT_EQ(tensorcore_block_slots(132, two), 132 * two.blocks_per_sm());
  EXPECT_EQ(two.blocks_per_sm(), 2 * one.blocks_per_sm());
}

TEST(TensorcoreCatalog, BuildsThatDoNotExistAreRefusedByName) {
  const TensorcoreVariant bad_two_blocks{64, 64, DType::bf16, DType::bf16, TensorcoreEngine::wgmma, true};
  const TensorcoreVariant bad_wgmma{16, 64, DType::bf16, DType::bf16, TensorcoreEngine::wgmma, false};
  for (const TensorcoreVariant& v : {bad_two_blocks, bad_wgmma}) {
    try {
      (void)v.smem_bytes();
      ADD_FAILURE() << v.name() << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(v.name()), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)v.blocks_per_sm(), InvalidArgument);
    // Nor is a build that does not exist claimed to be compiled in.
    EXPECT_FALSE(v.precompiled()) << v.name();
  }
  TensorcoreVariant bad_two_block_page = tensorcore_variant(16, 2, 64, DType::bf16, DType::fp8_e4m3, 1);
  ASSERT_TRUE(bad_two_block_page.precompiled());
  bad_two_block_page.rows = 16;
  bad_two_block_page.two_blocks = true;
  EXPECT_FALSE(bad_two_block_page.precompiled()) << bad_two_block_page.name();
}

TEST(TensorcoreCatalog, OnlySixtyFourRowTilesUseWgmma) {
  // Only 64-row tiles use wgmma; 16 rows, and 32 in small batches, keep
  // mma.sync (decode_shape's batch bucket is small).
  EXPECT_EQ(tensorcore_variant_for(decode_shape(16, 64)).engine, TensorcoreEngine::mma_sync);
  EXPECT_EQ(tensorcore_variant_for(decode_shape(24, 64)).engine, TensorcoreEngine::mma_sync);
  EXPECT_EQ(tensorcore_variant_for(decode_shape(64, 64)).engine == TensorcoreEngine::wgmma,
            kTensorcoreWgmmaFor64Rows);
}

TEST(TensorcoreCatalog, SixteenRowTilesOfFp8KvHaveAnFp8StepsBuild) {
  // 16-row tiles of fp8 KV (16 heads; 8 x q_len 2; one head) have the
  // fp8-steps build, precompiled and listed; the catalog chooses it at
  // every batch size unless HELIXMLA_TC_FP8_STEPS=0; 16-bit KV and 32-row
  // tiles keep their engines, and a hand-built variant of another shape is
  // refused.
  const std::int32_t big = 128;
  const bool chosen = tensorcore_fp8_steps_enabled();
  TensorcoreVariant fp8 = variant(16, 1, DType::fp8_e4m3, big);
  EXPECT_EQ(fp8.rows, 16);
  const auto on_fp8_steps = [](const TensorcoreVariant& v) { return v.engine == TensorcoreEngine::fp8_steps; };
  EXPECT_EQ(on_fp8_steps(fp8), chosen);
  EXPECT_EQ(on_fp8_steps(variant(8, 2, DType::fp8_e4m3, big)), chosen);
  EXPECT_EQ(on_fp8_steps(variant(1, 1, DType::fp8_e4m3, big)), chosen);
  EXPECT_FALSE(on_fp8_steps(variant(16, 1, DType::bf16, big)));
  EXPECT_FALSE(on_fp8_steps(variant(32, 1, DType::fp8_e4m3, big)));
  EXPECT_EQ(on_fp8_steps(variant(16, 1, DType::fp8_e4m3, 1)), chosen);
  fp8.engine = TensorcoreEngine::fp8_steps;
  EXPECT_EQ(fp8.name(), "tc_m16_p64_bf16_fp8_fp8steps");
  EXPECT_EQ(fp8.smem_bytes(), helixmla_tc::Fp8StepsLayout::kSmemBytes);
  EXPECT_EQ(fp8.blocks_per_sm(), 1);
  EXPECT_EQ(fp8.block_threads(), 256);
  EXPECT_FALSE(fp8.reads_kv_map());
  EXPECT_TRUE(fp8.precompiled());
  const BackendPtr b = make_tensorcore_backend();
  std::set<std::string> listed;
  for (const KernelVariant& v : b->catalog().inventory(hopper(false))) listed.insert(v.name);
  EXPECT_TRUE(listed.count(fp8.name())) << fp8.name();
  EXPECT_TRUE(listed.count("tc_m16_p64_bf16_fp8"));
  TensorcoreVariant wrong = fp8;
  wrong.kv_dtype = DType::bf16;
  EXPECT_FALSE(wrong.precompiled());
  EXPECT_THROW(wrong.smem_bytes(), InvalidArgument);
}

TEST(TensorcoreCatalog, FortyEightRowTilesOfFp8KvRunTheFp8StepsEngineWhenEnabled) {
  // 33-48 rows of fp8 KV (48 heads; 24 x q_len 2; 40 and 33 heads) take the
  // 48-row fp8-steps tile where HELIXMLA_TC_FP8_STEPS_48_ROWS is on, else
  // the padded 64-row one; 16-bit KV, 32 rows and 49 or more keep theirs.
  // The build is precompiled and listed; a 48-row tile on another engine
  // is refused.
  const bool chosen = tensorcore_48_row_tiles_enabled();
  for (const auto& [heads, q_len] : {std::pair{48, 1}, std::pair{24, 2}, std::pair{40, 1}, std::pair{33, 1}}) {
    const TensorcoreVariant v = variant(heads, q_len, DType::fp8_e4m3, 64);
    EXPECT_EQ(v.rows, chosen ? 48 : 64) << heads << " x " << q_len;
    EXPECT_EQ(v.engine == TensorcoreEngine::fp8_steps, chosen) << heads << " x " << q_len;
  }
  EXPECT_EQ(variant(48, 1, DType::bf16, 64).rows, 64);
  EXPECT_EQ(variant(49, 1, DType::fp8_e4m3, 64).rows, 64);
  EXPECT_EQ(variant(32, 1, DType::fp8_e4m3, 64).rows, 32);
  const TensorcoreVariant wide{.rows = 48, .page_size = 64, .q_dtype = DType::bf16, .kv_dtype = DType::fp8_e4m3,
                               .engine = TensorcoreEngine::fp8_steps};
  EXPECT_EQ(wide.name(), "tc_m48_p64_bf16_fp8_fp8steps");
  EXPECT_EQ(wide.smem_bytes(), helixmla_tc::Fp8StepsSplitLatentsLayout::kSmemBytes);
  EXPECT_EQ(wide.blocks_per_sm(), 1);
  EXPECT_EQ(wide.block_threads(), 256);
  EXPECT_TRUE(wide.precompiled());
  const BackendPtr b = make_tensorcore_backend();
  std::set<std::string> listed;
  for (const KernelVariant& v : b->catalog().inventory(hopper(false))) listed.insert(v.name);
  EXPECT_TRUE(listed.count(wide.name())) << wide.name();
  EXPECT_FALSE(listed.count("tc_m48_p64_bf16_fp8"));
  TensorcoreVariant plain = wide;
  plain.engine = TensorcoreEngine::mma_sync;
  EXPECT_FALSE(plain.precompiled());
  EXPECT_THROW(plain.smem_bytes(), InvalidArgument);
  TensorcoreVariant bf16 = wide;
  bf16.kv_dtype = DType::bf16;
  EXPECT_FALSE(bf16.precompiled());
  EXPECT_THROW(bf16.smem_bytes(), InvalidArgument);
}

TEST(TensorcoreCatalog, SixtyFourRowTilesOfSixteenBitKvRunTheSeesawEngineInBigBatches) {
  // 16-bit KV on 64-row tiles (128 heads; 48 x q_len 2; a context phase;
  // one tile or less: 64 heads, 48, 24 padded) takes the seesaw build in
  // batches from HELIXMLA_TC_SEESAW_FROM_BATCH on, precompiled and listed;
  // fp8 KV, 16-row tiles and smaller batches keep their engines.
  const std::int32_t big = HELIXMLA_TC_SEESAW_FROM_BATCH;
  const TensorcoreVariant bf16 = variant(128, 1, DType::bf16, big);
  const auto on_seesaw = [](const TensorcoreVariant& v) { return v.engine == TensorcoreEngine::seesaw; };
  EXPECT_TRUE(on_seesaw(bf16));
  EXPECT_EQ(bf16.name(), "tc_m64_p64_bf16_bf16_seesaw");
  EXPECT_EQ(bf16.smem_bytes(), helixmla_tc::SeesawLayout::kSmemBytes);
  EXPECT_TRUE(bf16.precompiled());
  EXPECT_TRUE(on_seesaw(variant(48, 2, DType::bf16, big)));
  EXPECT_TRUE(on_seesaw(variant(48, 0, DType::bf16, big)));
  EXPECT_TRUE(on_seesaw(variant(64, 1, DType::bf16, big)));
  EXPECT_TRUE(on_seesaw(variant(48, 1, DType::bf16, big)));
  // Its TMA copies read the pool's tensor map where pages hold whole tiles.
  EXPECT_TRUE(bf16.reads_kv_map());
  TensorcoreVariant small_pages = bf16;
  small_pages.page_size = 16;
  EXPECT_FALSE(small_pages.reads_kv_map());
  EXPECT_FALSE(variant(128, 1, DType::bf16, big / 2).reads_kv_map());
  const TensorcoreVariant padded = variant(24, 1, DType::bf16, big);
  EXPECT_EQ(padded.rows, 64);
  EXPECT_TRUE(on_seesaw(padded));
  EXPECT_FALSE(on_seesaw(variant(128, 1, DType::fp8_e4m3, big)));
  EXPECT_FALSE(on_seesaw(variant(16, 1, DType::bf16, big)));
  if (big > 1) EXPECT_FALSE(on_seesaw(variant(128, 1, DType::bf16, big / 2)));
  const BackendPtr b = make_tensorcore_backend();
  std::set<std::string> listed;
  for (const KernelVariant& v : b->catalog().inventory(hopper(false))) listed.insert(v.name);
  EXPECT_TRUE(listed.count(bf16.name())) << bf16.name();
  EXPECT_TRUE(listed.count("tc_m64_p64_bf16_bf16_wgmma"));
  // A hand-built seesaw variant of a shape the engine does not run is refused by name.
  TensorcoreVariant fp8 = bf16;
  fp8.kv_dtype = DType::fp8_e4m3;
  EXPECT_FALSE(fp8.precompiled());
  EXPECT_THROW(fp8.smem_bytes(), InvalidArgument);
  TensorcoreVariant sixteen = bf16;
  sixteen.rows = 16;
  EXPECT_FALSE(sixteen.precompiled());
  EXPECT_THROW(sixteen.smem_bytes(), InvalidArgument);
}

// Every (row, KV position) a row may see is covered by exactly one item of
// its row tile, and split entries are laid out as the combine expects.
void expect_plan_covers(const Problem& p, const TensorcorePlan& plan) {
  std::map<std::tuple<int, int>, std::vector<std::pair<int, int>>> ranges;  // (request, row tile)
  for (const auto& item : plan.items) {
    ranges[{item.request, item.row_begin}].push_back({item.kv_begin, item.kv_end});
    if (item.split >= 0) {
      EXPECT_GT(item.splits, 1);
      EXPECT_LT(item.split, item.splits);
    }
  }
  std::int32_t token = 0;
  for (std::int32_t r = 0; r < p.num_requests(); ++r) {
    const std::int32_t rows = p.q_len[r] * p.num_heads;
    for (std::int32_t begin = 0; begin < rows; begin += plan.rows_tile) {
      auto found = ranges.find({r, begin});
      ASSERT_NE(found, ranges.end()) << r << " " << begin;
      auto parts = found->second;
      std::sort(parts.begin(), parts.end());
      EXPECT_EQ(parts.front().first, 0);
      for (std::size_t i = 1; i < parts.size(); ++i) {
        EXPECT_EQ(parts[i].first, std::max(parts[i - 1].first, parts[i - 1].second));
      }
      std::int32_t visible = 0;
      for (std::int32_t row = begin; row < std::min(rows, begin + plan.rows_tile); ++row) {
        visible = std::max<std::int32_t>(
            visible, static_cast<std::int32_t>(visible_kv(p.kv_len[r], p.q_len[r], row / p.num_heads)));
      }
      EXPECT_EQ(std::max(parts.back().first, parts.back().second), visible);
    }
    token += p.q_len[r];
  }
  // Partial rows run on in segment order, segments of many splits first
  // (the combine's wide shape); entries tile [0, entries) in any order.
  std::int64_t rows = 0, wide_rows = 0;
  bool narrow_seen = false;
  std::vector<std::pair<std::int64_t, std::int64_t>> entry_ranges;
  for (const SplitSegment& seg : plan.segments) {
    EXPECT_EQ(seg.first_partial_row, rows);
    rows += seg.rows;
    const bool wide = seg.splits >= kSplitCombineWideFromSplits;
    EXPECT_FALSE(wide && narrow_seen) << "a segment of " << seg.splits << " splits after a narrow one";
    narrow_seen = narrow_seen || !wide;
    if (wide) wide_rows = rows;
    entry_ranges.emplace_back(seg.first_entry, seg.first_entry + std::int64_t{seg.rows} * seg.splits);
  }
  EXPECT_EQ(rows, plan.split_rows);
  EXPECT_EQ(wide_rows, plan.wide_split_rows);
  std::sort(entry_ranges.begin(), entry_ranges.end());
  std::int64_t entries = 0;
  for (const auto& [first, end] : entry_ranges) {
    EXPECT_EQ(first, entries);
    entries = end;
  }
  EXPECT_EQ(entries, plan.entries);
  EXPECT_GE(plan.workspace_bytes, plan.metadata_bytes + static_cast<std::size_t>(entries) * 2056);
}

// Decode requests of equal length, metadata only: plans need no tensors.
testing::BatchSpec decode_metadata(std::int32_t heads, std::int32_t generations, std::int32_t kv_len) {
  testing::BatchSpec spec;
  spec.heads = heads;
  spec.generations = generations;
  spec.kv_len = {kv_len};
  spec.allocate_tensors = false;
  return spec;
}

// A decode batch of equal requests and its plan for `rows`-row tiles on
// `slots` block slots; the batch owns the metadata the problem points into.
struct PlannedDecode {
  PlannedDecode(std::int32_t heads, std::int32_t generations, std::int32_t kv_len, std::int32_t rows,
                std::int32_t slots)
      : batch(decode_metadata(heads, generations, kv_len)),
        problem(batch.problem()),
        plan(plan_tensorcore(problem, rows, slots)) {}
  testing::SyntheticBatch batch;
  Problem problem;
  TensorcorePlan plan;
};

TEST(TensorcorePlan, OneLongRequestIsSplitToFillTheGpu) {
  const PlannedDecode d(128, 1, 32768, 64, 132);
  EXPECT_GE(d.plan.items.size(), 100u);
  EXPECT_EQ(d.plan.segments.size(), 2u);
  expect_plan_covers(d.problem, d.plan);
}

// Two 1M-token requests of 16 heads: 64 splits each would leave half of 264
// block slots idle.
TEST(TensorcorePlan, FewVeryLongRequestsFillEveryBlockSlot) {
  const PlannedDecode d(16, 2, 1048576, 16, 264);
  EXPECT_GE(d.plan.items.size(), 264u);
  EXPECT_LE(d.plan.items.size(), 2u * 264u);
  EXPECT_EQ(d.plan.segments.size(), 2u);
  expect_plan_covers(d.problem, d.plan);
}

// The runtime never plans an empty phase, but a direct call must not divide
// by the number of row tiles.
TEST(TensorcorePlan, AnEmptyPhasePlansNothing) {
  testing::BatchSpec spec = decode_metadata(16, 0, 64);
  spec.contexts = 0;
  testing::SyntheticBatch batch(spec);
  const TensorcorePlan plan = plan_tensorcore(batch.problem(), 16, 264);
  EXPECT_TRUE(plan.items.empty());
  EXPECT_TRUE(plan.segments.empty());
  EXPECT_EQ(plan.entries, 0);
}

TEST(TensorcorePlan, ManyEqualRequestsAreNotSplit) {
  const PlannedDecode d(128, 128, 4096, 64, 132);
  EXPECT_EQ(d.plan.items.size(), 256u);
  EXPECT_TRUE(d.plan.segments.empty());
  expect_plan_covers(d.problem, d.plan);
}

// Suite case 3: 64 row tiles of 256 KV tiles on 132 block slots. Two splits
// each (128 blocks) finish first; three would need a second wave.
TEST(TensorcorePlan, SixtyFourLongRequestsSplitInTwo) {
  const PlannedDecode d(64, 64, 8192, 64, 132);
  EXPECT_EQ(d.plan.items.size(), 128u);
  ASSERT_EQ(d.plan.segments.size(), 64u);
  for (const SplitSegment& segment : d.plan.segments) EXPECT_EQ(segment.splits, 2);
  expect_plan_covers(d.problem, d.plan);
}

// One long request among short ones: its splits are sized by the tiles of
// the whole batch, so no block holds more than an even share of them. The
// search used to bound the split count by (row tiles x splits), as if every
// row tile split alike, which left the 128K request of 128 heads in eight
// 512-tile items beside 157 tiles a block slot (3.3x the balanced time).
TEST(TensorcorePlan, OneLongRequestAmongShortOnesIsSplitByEveryonesTiles) {
  struct Case {
    std::int32_t heads, rows, slots, long_kv;
  };
  for (const Case c : {Case{128, 64, 132, 131072}, Case{16, 16, 264, 1048576}, Case{64, 64, 132, 32768}}) {
    testing::BatchSpec spec = decode_metadata(c.heads, 64, c.long_kv);
    for (std::int32_t i = 1; i < spec.generations; ++i) spec.kv_len.push_back(2048 + 37 * i);
    testing::SyntheticBatch batch(spec);
    const Problem problem = batch.problem();
    const TensorcorePlan plan = plan_tensorcore(problem, c.rows, c.slots);
    std::int64_t total_tiles = 0;
    std::int64_t longest_tiles = 0;
    for (const helixmla_tc::WorkItem& item : plan.items) {
      constexpr std::int64_t kTile = helixmla_tc::kTileTokens;
      const std::int64_t tiles = (item.kv_end - item.kv_begin + kTile - 1) / kTile;
      total_tiles += tiles;
      longest_tiles = std::max(longest_tiles, tiles);
    }
    EXPECT_LE(longest_tiles, (total_tiles + c.slots - 1) / c.slots)
        << c.heads << " heads, one request of " << c.long_kv << " tokens";
    expect_plan_covers(problem, plan);
  }
}

// Byte-equal plans: the same items, segments and workspace layout.
void expect_same_plan(const TensorcorePlan& a, const TensorcorePlan& b) {
  ASSERT_EQ(a.items.size(), b.items.size());
  EXPECT_EQ(std::memcmp(a.items.data(), b.items.data(), a.items.size() * sizeof(a.items[0])), 0);
  ASSERT_EQ(a.segments.size(), b.segments.size());
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    EXPECT_EQ(a.segments[i].first_entry, b.segments[i].first_entry);
    EXPECT_EQ(a.segments[i].splits, b.segments[i].splits);
  }
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
}

// workspace_bytes and prepare share one plan per phase; any input the plan
// depends on, changed in value (even in the caller's own buffer), plans anew.
TEST(TensorcorePlan, ARepeatedPhaseReusesItsPlanAndAChangedOneDoesNot) {
  const PlannedDecode d(64, 64, 8192, 64, 132);
  Problem phase = d.problem;
  std::vector<std::int32_t> kv_len(phase.kv_len.begin(), phase.kv_len.end());
  phase.kv_len = kv_len;
  const auto first = tensorcore_plan_for(phase, 64, 132);
  expect_same_plan(*first, d.plan);
  EXPECT_EQ(tensorcore_plan_for(phase, 64, 132), first);

  kv_len[5] = 100;  // one request shorter, same buffer
  const auto shorter = tensorcore_plan_for(phase, 64, 132);
  EXPECT_NE(shorter, first);
  expect_same_plan(*shorter, plan_tensorcore(phase, 64, 132));
  EXPECT_NE(shorter->items.size(), first->items.size());

  EXPECT_NE(tensorcore_plan_for(phase, 64, 264), shorter);  // more block slots
  const auto again = tensorcore_plan_for(phase, 64, 132);
  expect_same_plan(*again, *shorter);

  std::vector<std::int32_t> bounds(static_cast<std::size_t>(phase.num_tokens()), 4096);
  phase.helix.token_kv_bounds = bounds;
  const auto bounded = tensorcore_plan_for(phase, 64, 132);
  EXPECT_NE(bounded, again);
  expect_same_plan(*bounded, plan_tensorcore(phase, 64, 132));
}

TEST(TensorcorePlan, VerifyGroupsAndUnevenLengthsAreCovered) {
  testing::BatchSpec spec;
  spec.heads = 24;
  spec.generations = 5;
  spec.q_len = 4;
  spec.kv_len = {3, 7000, 64, 20000, 1};
  spec.page_size = 16;
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const Problem p = batch.problem();
  for (std::int32_t tile : {16, 32, 64}) expect_plan_covers(p, plan_tensorcore(p, tile, 132));
}

// A verify batch whose long request finished and another, slightly shorter
// (the same pages), took its slot: its own best plan has other split counts
// (another grid), which a captured run cannot take; keeping the prepared
// counts covers the new step on the prepared grid and layout, and finishes
// as soon by the estimate.
struct KeptStep {
  explicit KeptStep(std::vector<std::int32_t> next_kv_len, std::int32_t next_q_len = 2)
      : step(spec_of({20001, 130, 301}, 2)),
        next(spec_of(std::move(next_kv_len), next_q_len)),
        next_problem(next.problem()),
        prepared(plan_tensorcore(step.problem(), 64, 132)),
        best(plan_tensorcore(next_problem, 64, 132)),
        kept(TensorcoreSplitSearch(next_problem, 64, 132).plan_keeping_splits(prepared)) {}
  static testing::BatchSpec spec_of(std::vector<std::int32_t> kv_len, std::int32_t q_len) {
    testing::BatchSpec spec = decode_metadata(24, 3, 0);
    spec.q_len = q_len;
    spec.kv_len = std::move(kv_len);
    spec.page_table_stride = 313;  // an engine's fixed width: 20001 tokens of 64-token pages
    return spec;
  }
  testing::SyntheticBatch step, next;
  Problem next_problem;
  TensorcorePlan prepared, best;
  std::optional<TensorcorePlan> kept;
};

void expect_same_grid(const TensorcorePlan& a, const TensorcorePlan& b) {
  EXPECT_EQ(a.items.size(), b.items.size());
  EXPECT_EQ(a.segments.size(), b.segments.size());
  EXPECT_EQ(a.entries, b.entries);
  EXPECT_EQ(a.split_rows, b.split_rows);
  EXPECT_EQ(a.wide_split_rows, b.wide_split_rows);
  EXPECT_EQ(a.page_table_offset, b.page_table_offset);
  EXPECT_EQ(a.partial_out_offset, b.partial_out_offset);
  EXPECT_EQ(a.partial_stats_offset, b.partial_stats_offset);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
}

TEST(TensorcorePlan, KeptSplitCountsPlanAnotherStepOnThePreparedGrid) {
  const KeptStep s({19969, 131, 302});
  ASSERT_NE(s.best.items.size(), s.prepared.items.size()) << "the step's own plan launches alike";
  ASSERT_TRUE(s.kept);
  EXPECT_EQ(s.kept->row_tile_splits, s.prepared.row_tile_splits);
  expect_same_grid(*s.kept, s.prepared);
  expect_plan_covers(s.next_problem, *s.kept);
  EXPECT_TRUE(keeping_splits_pays(estimated_finish(*s.kept, 132), estimated_finish(s.best, 132)));
}

// The long request replaced by a short one: its many splits go to the now
// longest request (301 tokens, ten KV tiles), and those past its KV are
// empty (they start and end where it ends).
TEST(TensorcorePlan, KeptSplitsPastAShortRequestAreEmpty) {
  const KeptStep s({100, 130, 301});
  ASSERT_TRUE(s.kept);
  expect_same_grid(*s.kept, s.prepared);
  expect_plan_covers(s.next_problem, *s.kept);
  EXPECT_GT(testing::empty_items_of(s.kept->items, 2), 100);
}

// The long request finished and a new one as long arrived in another slot:
// the kept split counts follow the length, so the kept plan is the fresh
// plan's twin and finishes as soon.
TEST(TensorcorePlan, KeptSplitsFollowTheLongestRequestToItsSlot) {
  const KeptStep s({130, 20001, 301});
  ASSERT_TRUE(s.kept);
  expect_same_grid(*s.kept, s.prepared);
  expect_plan_covers(s.next_problem, *s.kept);
  EXPECT_EQ(s.kept->row_tile_splits[1], s.prepared.row_tile_splits[0]);
  EXPECT_EQ(s.kept->row_tile_splits[0], s.prepared.row_tile_splits[1]);
  EXPECT_EQ(estimated_finish(*s.kept, 132), estimated_finish(s.best, 132));
}

// The bound a refresh checks kept split counts against before (instead of)
// searching: never above the searched plan's estimate, and close to it.
TEST(TensorcorePlan, TheFinishLowerBoundIsAtMostTheSearchedPlansEstimate) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    testing::BatchSpec spec = decode_metadata(std::array{16, 48, 128}[trial % 3], 1 + trial % 97, 0);
    spec.q_len = 1 + trial % 2;
    spec.kv_len.clear();
    std::uniform_int_distribution<std::int32_t> length(1, trial % 4 == 0 ? 200000 : 20000);
    for (std::int32_t r = 0; r < spec.generations; ++r) spec.kv_len.push_back(length(rng));
    testing::SyntheticBatch batch(spec);
    const Problem p = batch.problem();
    for (const std::int32_t slots : {132, 264}) {
      const std::int64_t bound = TensorcoreSplitSearch(p, 64, slots).finish_lower_bound();
      const std::int64_t searched = estimated_finish(plan_tensorcore(p, 64, slots), slots);
      EXPECT_GT(bound, 0) << trial;
      EXPECT_LE(bound, searched) << trial << " on " << slots << " slots";
      EXPECT_GE(bound * 2, searched) << trial << " on " << slots << " slots";
    }
  }
}

// Split counts change hands only among row tiles of equal rows, the
// longest taking the most; other row counts leave nothing to keep.
TEST(ReassignedSplits, TheLongestRowTileOfEachSizeTakesTheMostSplits) {
  const std::vector<std::int32_t> kept_rows = {64, 64, 16, 64, 16};
  const std::vector<std::int32_t> kept_splits = {1, 5, 3, 2, 1};
  const std::vector<std::int64_t> tiles = {90, 10, 4, 50, 40};
  const auto splits = reassigned_splits(kept_rows, kept_splits, kept_rows, tiles);
  ASSERT_TRUE(splits);
  EXPECT_EQ(*splits, (std::vector<std::int32_t>{5, 1, 1, 2, 3}));
  const std::vector<std::int32_t> other_rows = {64, 64, 16, 16, 16};
  EXPECT_FALSE(reassigned_splits(kept_rows, kept_splits, other_rows, tiles));
  EXPECT_FALSE(reassigned_splits(kept_rows, kept_splits, std::span(kept_rows).first(4), std::span(tiles).first(4)));
}

TEST(TensorcorePlan, KeptSplitsAreNotWorthALongRequestInAnUnsplitSlot) {
  const KeptStep s({20001, 130, 19000});
  ASSERT_TRUE(s.kept);
  EXPECT_FALSE(keeping_splits_pays(estimated_finish(*s.kept, 132), estimated_finish(s.best, 132)))
      << estimated_finish(*s.kept, 132) << " against " << estimated_finish(s.best, 132);
}

TEST(TensorcorePlan, SplitCountsAreKeptOnlyForTheSameRowTiles) {
  EXPECT_FALSE(KeptStep({20001, 130, 301}, 3).kept);  // 72 rows: two row tiles a request
  const KeptStep s({19969, 131, 302});
  EXPECT_FALSE(TensorcoreSplitSearch(s.next_problem, 32, 132).plan_keeping_splits(s.prepared))
      << "a plan of 64-row tiles kept by a search of 32-row tiles";
}

// What a captured run refreshed for the step takes, when only plans on the
// prepared grid launch alike: the kept counts where they pay, nothing where
// they do not (prepare anew), the step's own plan where it launches alike.
TEST(TensorcorePlan, ARefreshTakesKeptCountsOnlyWhenTheyPay) {
  const auto refreshed = [](const KeptStep& s) {
    return TensorcoreSplitSearch(s.next_problem, 64, 132).plan_to_refresh(s.prepared, [&](const TensorcorePlan& p) {
      return p.items.size() == s.prepared.items.size() && p.workspace_bytes == s.prepared.workspace_bytes;
    });
  };
  const KeptStep pays({19969, 131, 302});
  const auto kept = refreshed(pays);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->row_tile_splits, pays.prepared.row_tile_splits);
  expect_plan_covers(pays.next_problem, *kept);

  EXPECT_FALSE(refreshed(KeptStep({20001, 130, 19000}))) << "kept counts that do not pay";

  const KeptStep same({20001, 130, 301});
  const auto own = refreshed(same);
  ASSERT_TRUE(own);
  expect_same_plan(*own, same.best);
}

// A search builds its parts on first use; whichever answer is asked first,
// each is what a fresh search gives, and the plan is plan_tensorcore's.
TEST(TensorcorePlan, ASearchAnswersAlikeInAnyOrder) {
  const KeptStep s({19969, 131, 302});
  const TensorcoreSplitSearch bound_first(s.next_problem, 64, 132);
  const std::int64_t bound = bound_first.finish_lower_bound();
  const TensorcorePlan plan_after_bound = bound_first.plan();
  const std::optional<TensorcorePlan> kept_last = bound_first.plan_keeping_splits(s.prepared);

  const TensorcoreSplitSearch kept_first(s.next_problem, 64, 132);
  const std::optional<TensorcorePlan> kept = kept_first.plan_keeping_splits(s.prepared);
  const TensorcorePlan plan = kept_first.plan();
  EXPECT_EQ(kept_first.finish_lower_bound(), bound);

  expect_same_plan(plan, s.best);
  expect_same_plan(plan_after_bound, s.best);
  ASSERT_TRUE(kept && kept_last && s.kept);
  expect_same_plan(*kept, *s.kept);
  expect_same_plan(*kept_last, *s.kept);
  EXPECT_LE(bound, estimated_finish(plan, 132));
}

}  // namespace
}  // namespace helixmla::cuda

#endif  // HELIXMLA_WITH_CUDA

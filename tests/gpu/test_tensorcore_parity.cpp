// The cuda_tensorcore backend against the float64 reference: heads x page
// size x q_len x KV dtype, just-in-time page sizes, fp16, Helix bounds and
// statistics, split-KV, mixed batches, caller workspaces and CUDA graph
// replay. Outputs are NaN-poisoned before every run, so an element the kernel
// never wrote cannot pass.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/tensorcore_backend.hpp"
#include "cuda/tensorcore_jit.hpp"
#include "cuda/tensorcore_plan.hpp"
#include "cuda/tensorcore_run.hpp"
#include "cuda/tensorcore_variants.hpp"
#include "device_batch.hpp"
#include "gpu/gpu_test_support.hpp"
#include "helixmla/error.hpp"
#include "helixmla/validate.hpp"
#include "support/gpu_skip.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {
namespace {

#define SKIP_WITHOUT_TENSORCORE()                                                         \
  do {                                                                                   \
    HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);                                               \
    if (!cuda::make_tensorcore_backend()->available(Environment::detect())) {             \
      GTEST_SKIP() << "cuda_tensorcore unavailable: "                                     \
                   << cuda::make_tensorcore_backend()->available(Environment::detect()).reason; \
    }                                                                                    \
  } while (0)

struct RunInfo {
  int phases = 0;
  bool any_split = false;
  std::int32_t fewest_splits = 0;  // of the split row tiles (0: none split)
  std::int32_t most_splits = 0;
  bool any_jit = false;
  bool any_wgmma = false;
  bool any_two_blocks = false;
};

// Plans the phases of `device_problem`, requires the tensor-core backend to
// claim each, and prepares them (own workspace) without launching.
std::vector<std::unique_ptr<PreparedRun>> prepare_all(const Problem& device_problem, cudaStream_t stream,
                                                      RunInfo* info) {
  const BackendPtr backend = cuda::make_tensorcore_backend();
  std::vector<std::unique_ptr<PreparedRun>> runs;
  for (const ClaimedPhase& phase : claim_phases(*backend, device_problem, Environment::detect())) {
    if (info) {
      ++info->phases;
      info->any_jit = info->any_jit || !phase.kernel.precompiled;
      const Problem& part = phase.problem;
      int sms = 0;
      check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sm count");
      // The variant the catalog claimed is the one the run launches.
      const cuda::TensorcoreVariant v = cuda::tensorcore_variant_for(phase.shape);
      EXPECT_EQ(v, cuda::tensorcore_variant_of(part)) << v.name();
      EXPECT_EQ(phase.kernel.name, v.name());
      const cuda::TensorcorePlan p = cuda::plan_tensorcore(part, v.rows, cuda::tensorcore_block_slots(sms, v));
      info->any_split = info->any_split || !p.segments.empty();
      for (const cuda::SplitSegment& seg : p.segments) {
        info->most_splits = std::max(info->most_splits, seg.splits);
        info->fewest_splits = info->fewest_splits == 0 ? seg.splits : std::min(info->fewest_splits, seg.splits);
      }
      info->any_wgmma = info->any_wgmma || v.engine == cuda::TensorcoreEngine::wgmma ||
                        v.engine == cuda::TensorcoreEngine::seesaw;
      info->any_two_blocks = info->any_two_blocks || v.two_blocks;
    }
    runs.push_back(backend->prepare(phase.problem, Workspace{}, stream));
  }
  return runs;
}

RunInfo run_tensorcore(const Problem& device_problem, cudaStream_t stream) {
  RunInfo info;
  auto runs = prepare_all(device_problem, stream, &info);
  for (auto& run : runs) run->enqueue(stream);
  check_cuda(cudaStreamSynchronize(stream), "run synchronize");
  return info;
}

RunInfo expect_parity(SyntheticBatch& host, const std::string& label) {
  DeviceBatch device(host);
  TestStream stream;
  device.poison_outputs();
  check_cuda(cudaDeviceSynchronize(), "poison");
  RunInfo info;
  try {
    info = run_tensorcore(device.problem(), stream.get());
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": " << e.what();
    return info;
  }
  device.download_outputs();
  expect_matches_reference(host, label);
  return info;
}

std::string label_of(const BatchSpec& s) {
  return "H" + std::to_string(s.heads) + " q" + std::to_string(s.q_len) + " page" +
         std::to_string(s.page_size) + " kv=" + std::string(to_string(s.kv_dtype)) + " q=" +
         std::string(to_string(s.q_dtype)) + " gens" + std::to_string(s.generations) + " ctx" +
         std::to_string(s.contexts);
}

BatchSpec decode_spec(std::int32_t heads, std::int32_t q_len, std::int32_t page, DType kv) {
  BatchSpec s;
  s.heads = heads;
  s.q_len = q_len;
  s.page_size = page;
  s.kv_dtype = kv;
  s.q_dtype = default_q_dtype(kv);
  s.kv_scale = kv == DType::fp8_e4m3 ? 0.0625f : 1.0f;
  s.generations = 3;
  s.kv_len = {5, 301, 130};  // partial KV tiles and pages, a request shorter than a tile
  s.stats = true;
  s.seed = static_cast<std::uint64_t>(heads * 1000 + q_len * 100 + page);
  return s;
}

class TensorcoreSweep : public ::testing::TestWithParam<std::tuple<DType, std::int32_t>> {};

TEST_P(TensorcoreSweep, MatchesReferenceForEveryHeadCountAndQLen) {
  SKIP_WITHOUT_TENSORCORE();
  const auto [kv, page] = GetParam();
  for (std::int32_t heads : {1, 16, 24, 48, 64, 96, 128}) {
    for (std::int32_t q_len : {1, 2, 4}) {
      BatchSpec spec = decode_spec(heads, q_len, page, kv);
      SyntheticBatch host(spec);
      expect_parity(host, label_of(spec));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PagesAndKv, TensorcoreSweep,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::fp8_e4m3),
                                            ::testing::Values(1, 16, 32, 64, 128)));

// 17-32 rows with 16-bit KV in a batch of kWgmmaFor32RowsFromBatch
// requests or more run padded on the 64-row wgmma kernel; fp8 KV keeps
// its 32-row kernel (bench/RESULTS.md, session 14).
TEST(TensorcoreRowTile, ThirtyTwoRowsInBigBatchesRunPaddedOnWgmma) {
  SKIP_WITHOUT_TENSORCORE();
  for (const auto& [heads, q_len] : {std::pair{16, 2}, std::pair{24, 1}}) {
    for (const DType kv : {DType::bf16, DType::fp8_e4m3}) {
      BatchSpec spec = decode_spec(heads, q_len, 64, kv);
      spec.generations = cuda::kWgmmaFor32RowsFromBatch;
      spec.kv_len = {40, 301, 700, 129};  // cycled over the requests
      SyntheticBatch host(spec);
      const RunInfo info = expect_parity(host, label_of(spec));
      EXPECT_EQ(info.any_wgmma, kv != DType::fp8_e4m3 && cuda::kTensorcoreWgmmaFor64Rows) << label_of(spec);
    }
  }
}

// 17-32 rows with fp8 KV in big batches run the kernel's two-block build
// (three stages, one tile per step), a compiled kernel of its own.
TEST(TensorcoreTwoBlocks, BigFp8BatchesOfThirtyTwoRowsMatch) {
  SKIP_WITHOUT_TENSORCORE();
  for (const auto& [heads, q_len] : {std::pair{16, 2}, std::pair{24, 1}}) {
    for (const std::int32_t page : {64, 5}) {  // precompiled and just in time
      if (page == 5 && !Environment::detect().nvrtc) continue;
      BatchSpec spec = decode_spec(heads, q_len, page, DType::fp8_e4m3);
      spec.generations = cuda::kTwoBlocks32RowFp8FromBatch;
      spec.kv_len = {40, 301, 700, 129};  // cycled over the requests
      SyntheticBatch host(spec);
      const RunInfo info = expect_parity(host, label_of(spec));
      EXPECT_TRUE(info.any_two_blocks) << label_of(spec);
      EXPECT_EQ(info.any_jit, page == 5) << label_of(spec);
    }
  }
}

// The KV scale dequantises every KV dtype, not only fp8.
TEST(TensorcoreScale, SixteenBitKvScaleIsApplied) {
  SKIP_WITHOUT_TENSORCORE();
  for (std::int32_t heads : {16, 48, 128}) {
    BatchSpec spec = decode_spec(heads, 1, 64, DType::bf16);
    spec.kv_scale = 0.5f;
    SyntheticBatch host(spec);
    expect_parity(host, label_of(spec) + " kv_scale 0.5");
  }
}

// fp8 KV runs its matrix steps in fp16, with bf16 queries scaled per block
// by a power of two: queries far beyond fp16's range, or deep below its
// normal range, must match as well. The queries are multiplied by 2^e and
// the softmax scale by 2^-e, exactly, so the answer is the unscaled one.
TEST(TensorcoreFp8, BfloatQueriesOutsideFp16RangeMatch) {
  SKIP_WITHOUT_TENSORCORE();
  for (const int e : {40, -40}) {
    for (std::int32_t heads : {16, 24, 48}) {  // row tiles of 16, 32 and 64
      BatchSpec spec = decode_spec(heads, 2, 64, DType::fp8_e4m3);
      SyntheticBatch host(spec);
      const std::int64_t count = static_cast<std::int64_t>(host.q_bytes() / dtype_size(spec.q_dtype));
      for (std::int64_t i = 0; i < count; ++i) {
        store_from_float(host.q_.data(), spec.q_dtype, i,
                         std::ldexp(load_as_float(host.q_.data(), spec.q_dtype, i), e));
      }
      host.softmax_scale_ = std::ldexp(host.softmax_scale_, -e);
      expect_parity(host, label_of(spec) + " Q x 2^" + std::to_string(e));
    }
  }
}

TEST(TensorcoreJit, PageSizesOutsideThePrecompiledSetRun) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  // Pages 12 and 3 are under a tile (page ids widened at the copy) and JIT
  // only; 48 and 96 are whole tiles outside the precompiled set.
  for (std::int32_t page : {48, 96, 12, 3}) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      BatchSpec spec = decode_spec(48, page < 16 ? 2 : 1, page, kv);
      SyntheticBatch host(spec);
      const RunInfo info = expect_parity(host, label_of(spec));
      EXPECT_TRUE(info.any_jit) << label_of(spec);
    }
  }
}

// Each just-in-time variant is made once per process under a lock of its
// own: threads preparing different ones at once (pages no other test uses,
// so they compile here) each get theirs and match.
TEST(TensorcoreJit, ThreadsPreparingDifferentVariantsAtOnceEachMatch) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  std::vector<std::thread> threads;
  for (std::int32_t page : {40, 80, 24}) {
    threads.emplace_back([page] {
      BatchSpec spec = decode_spec(16, 1, page, DType::bf16);
      SyntheticBatch host(spec);
      const RunInfo info = expect_parity(host, label_of(spec));
      EXPECT_TRUE(info.any_jit) << label_of(spec);
    });
  }
  for (std::thread& t : threads) t.join();
}

// A just-in-time kernel whose set-up fails after its module loaded (here a
// shared-memory size no device has) throws by name, and unloads the module:
// every retry loads it again, and device memory must not shrink with each.
// Page 56 is a variant no other test loads, since a kernel loaded once is
// kept for the process and its set-up never runs again.
TEST(TensorcoreJit, AFailedKernelSetUpLeavesNoModuleLoaded) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  const cuda::TensorcoreVariant variant = cuda::tensorcore_variant(16, 1, 56, DType::bf16, DType::bf16, 1);
  constexpr int kNoDeviceHasThisMuch = 64 << 20;
  const auto fail_once = [&] {
    try {
      cuda::tensorcore_jit_function(variant, kNoDeviceHasThisMuch);
      ADD_FAILURE() << "a 64 MiB shared-memory limit was accepted";
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(std::string(e.what()).find("cuFuncSetAttribute"), std::string::npos) << e.what();
    }
  };
  fail_once();  // compiles or loads from the cache, and warms the driver's pools
  std::size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  // 64 leaked modules measured 2 MiB on an H200 (the driver's granule), so
  // 256 leave several granules where none may go.
  constexpr int kRetries = 256;
  for (int i = 0; i < kRetries; ++i) fail_once();
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  const std::int64_t shrunk = static_cast<std::int64_t>(free_before) - static_cast<std::int64_t>(free_after);
  std::printf("device memory after %d failed set-ups: %lld bytes less\n", kRetries, static_cast<long long>(shrunk));
  EXPECT_LT(shrunk, 2 << 20) << "each failed set-up left its module loaded";

  const CUfunction usable = cuda::tensorcore_jit_function(variant, variant.smem_bytes());
  EXPECT_NE(usable, nullptr);
  EXPECT_GT(cuda::jit_kernel_registers(usable), 0);
}

TEST(TensorcoreJit, Fp16QueriesWithFp16AndFp8Kv) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  for (DType kv : {DType::fp16, DType::fp8_e4m3}) {
    for (std::int32_t heads : {16, 128}) {
      BatchSpec spec = decode_spec(heads, 2, 64, kv);
      spec.q_dtype = DType::fp16;
      SyntheticBatch host(spec);
      expect_parity(host, label_of(spec));
    }
  }
}

// fp8 KV on wgmma runs a producer warpgroup that hands widened tiles to the
// matrix warpgroups through a ring of three, with named barriers whose
// arrivals must match the item's tile count exactly (a mismatch hangs or
// reads a stale tile): items of one to seven tiles, partial tiles among
// them, bf16 and fp16 Q, a precompiled and a just-in-time page size.
TEST(TensorcoreFp8Producer, ItemsOfEveryShortTileCountMatch) {
  SKIP_WITHOUT_TENSORCORE();
  const bool nvrtc = Environment::detect().nvrtc;
  for (DType q : {DType::bf16, DType::fp16}) {
    for (std::int32_t page : {64, 48}) {
      if ((q == DType::fp16 || page == 48) && !nvrtc) continue;
      BatchSpec spec = decode_spec(64, 1, page, DType::fp8_e4m3);
      spec.q_dtype = q;
      spec.kv_len = {1, 31, 32, 33, 64, 65, 96, 97, 128, 129, 160, 161, 192, 193, 224};
      spec.generations = static_cast<std::int32_t>(spec.kv_len.size());
      SyntheticBatch host(spec);
      const RunInfo info = expect_parity(host, label_of(spec));
      EXPECT_TRUE(info.any_wgmma) << label_of(spec);
    }
  }
}

// Per-token Helix bounds that differ inside a verify group, including tokens
// that see nothing (stats (-inf, 0), zero output).
// Runs `spec` on its row tile (64 rows; 16 or 48 for the fp8-steps engine,
// by the request's rows) on `engine` (compiled just in time where the
// catalog would not pick it), under Helix per-token `bounds` if any, and
// checks it against the reference.
void expect_engine_matches(SyntheticBatch& host, cuda::TensorcoreEngine engine,
                           const std::vector<std::int32_t>& bounds = {}) {
  const BatchSpec& spec = host.spec();
  DeviceBatch device(host);
  TestStream stream;
  Problem p = device.problem();
  if (!bounds.empty()) {
    p.helix.cp_size = 2;
    p.helix.cp_rank = 1;
    p.helix.token_kv_bounds = bounds;
  }
  validate(p);
  cuda::TensorcoreVariant variant = cuda::tensorcore_variant_of(p);
  if (engine == cuda::TensorcoreEngine::fp8_steps) {
    variant.rows = spec.heads * spec.q_len <= 16 ? 16 : cuda::kTensorcoreFp8StepsWideRows;
    ASSERT_LE(spec.heads * spec.q_len, variant.rows) << label_of(spec);
    variant.two_blocks = false;
  }
  if (engine == cuda::TensorcoreEngine::wgmma || engine == cuda::TensorcoreEngine::seesaw) {
    ASSERT_EQ(variant.rows, 64) << label_of(spec);
  }
  variant.engine = engine;
  const std::string label = label_of(spec) + " " + variant.name();
  device.poison_outputs();
  check_cuda(cudaDeviceSynchronize(), "poison");
  try {
    auto run = cuda::prepare_tensorcore(p, variant, Workspace{}, stream.get());
    run->enqueue(stream.get());
    stream.synchronize();
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": " << e.what();
    return;
  }
  device.download_outputs();
  expect_matches_reference(host, label, p.helix);
}
void expect_engine_matches(const BatchSpec& spec, cuda::TensorcoreEngine engine,
                           const std::vector<std::int32_t>& bounds = {}) {
  SyntheticBatch host(spec);
  expect_engine_matches(host, engine, bounds);
}

// 64-row tiles have three matrix engines (the seesaw engine for 16-bit KV,
// wgmma, mma.sync); those the catalog does not pick are compiled just in
// time here, so all stay verified.
TEST(TensorcoreEngines, EveryEngineOf64RowTilesMatchesReference) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  for (const cuda::TensorcoreEngine engine :
       {cuda::TensorcoreEngine::seesaw, cuda::TensorcoreEngine::wgmma, cuda::TensorcoreEngine::mma_sync}) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      if (engine == cuda::TensorcoreEngine::seesaw && kv == DType::fp8_e4m3) continue;  // 16-bit KV only
      for (std::int32_t heads : {48, 128}) {
        BatchSpec spec = decode_spec(heads, heads == 48 ? 2 : 1, heads == 48 ? 16 : 64, kv);
        spec.kv_len = {700, 37, 2000};
        expect_engine_matches(spec, engine);
      }
    }
  }
}

// The seesaw engine runs 64-row tiles in batches of
// HELIXMLA_TC_SEESAW_FROM_BATCH or more, which the small test batches
// elsewhere are not: here it runs every page class (per-row page lookups
// under a tile, pages of a tile and more, a page size that is not a power
// of two), requests of several row tiles and of one (64 rows, 48, and 24
// padded to 64), verify groups with their masks, partial and odd tile
// counts, fp16, and statistics.
TEST(TensorcoreEngines, SeesawEngineMatchesReferenceAcrossPagesAndVerifyGroups) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  for (std::int32_t page : {1, 3, 16, 64, 128}) {
    for (const auto& [heads, q_len] :
         {std::pair{128, 1}, std::pair{96, 2}, std::pair{48, 4}, std::pair{64, 1}, std::pair{48, 1}, std::pair{24, 1}}) {
      BatchSpec spec = decode_spec(heads, q_len, page, DType::bf16);
      spec.kv_len = {5, 301, 130, 1000};
      // 17-32 rows take the 64-row tile only in a batch of 16 or more.
      if (heads * q_len <= 32) spec.kv_len = {5, 301, 130, 1000, 64, 7, 640, 90, 33, 128, 1, 250, 700, 66, 12, 400};
      spec.generations = static_cast<std::int32_t>(spec.kv_len.size());
      expect_engine_matches(spec, cuda::TensorcoreEngine::seesaw);
    }
  }
  BatchSpec fp16 = decode_spec(128, 1, 64, DType::fp16);
  fp16.kv_len = {777, 64, 2048};
  expect_engine_matches(fp16, cuda::TensorcoreEngine::seesaw);
}

// 16-row tiles of fp8 KV went to the fp8-steps engine by default in
// session 29; their mma.sync build stays the A/B path
// (HELIXMLA_TC_FP8_STEPS=0), so it stays verified here.
TEST(TensorcoreEngines, MmaSyncEngineOfSixteenRowFp8TilesMatchesReference) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  for (std::int32_t page : {3, 64}) {
    for (const auto& [heads, q_len] : {std::pair{16, 1}, std::pair{8, 2}, std::pair{1, 1}}) {
      BatchSpec spec = decode_spec(heads, q_len, page, DType::fp8_e4m3);
      spec.kv_len = {5, 301, 1000, 64};
      spec.generations = static_cast<std::int32_t>(spec.kv_len.size());
      expect_engine_matches(spec, cuda::TensorcoreEngine::mma_sync);
    }
  }
}

// The fp8-steps engine forced (the parity tests elsewhere run it too, by
// the catalog's choice) on requests of each (heads, q_len) in `shapes`,
// over every page class (a page a row, a page size that is not a power of
// two, pages under and over its 64-token tile) with the requests `kv_len`;
// then `heads` heads on items split over a long request and with fp16 Q,
// and verify groups of four at `helix_heads` heads under Helix per-token
// bounds with tokens that see nothing. Statistics throughout.
void expect_fp8_steps_engine_matches(std::initializer_list<std::pair<std::int32_t, std::int32_t>> shapes,
                                     const std::vector<std::int32_t>& kv_len, std::int32_t heads,
                                     std::int32_t helix_heads) {
  for (std::int32_t page : {1, 3, 16, 64, 128}) {
    for (const auto& [h, q_len] : shapes) {
      BatchSpec spec = decode_spec(h, q_len, page, DType::fp8_e4m3);
      spec.kv_len = kv_len;
      spec.generations = static_cast<std::int32_t>(spec.kv_len.size());
      expect_engine_matches(spec, cuda::TensorcoreEngine::fp8_steps);
    }
  }
  BatchSpec split = decode_spec(heads, 1, 64, DType::fp8_e4m3);
  split.kv_len = {20000, 70};
  split.generations = 2;
  expect_engine_matches(split, cuda::TensorcoreEngine::fp8_steps);
  BatchSpec fp16 = decode_spec(heads, 1, 64, DType::fp8_e4m3);
  fp16.q_dtype = DType::fp16;
  fp16.kv_len = {777, 64, 2048};
  fp16.generations = 3;
  expect_engine_matches(fp16, cuda::TensorcoreEngine::fp8_steps);
  BatchSpec helix = decode_spec(helix_heads, 4, 16, DType::fp8_e4m3);
  helix.kv_len = {70, 1000, 3};
  helix.generations = 3;
  std::vector<std::int32_t> bounds;
  for (std::int32_t kv : helix.kv_len) {
    for (std::int32_t t = 0; t < 4; ++t) bounds.push_back(t < 2 ? 0 : std::min(kv, kv / 2 + 7 * t));
  }
  expect_engine_matches(helix, cuda::TensorcoreEngine::fp8_steps, bounds);
}

// 16-row tiles: 16 rows as heads or verify groups and fewer (the rest
// padding); requests shorter than a tile, partial and odd tile counts (one
// warpgroup's tiles only).
TEST(TensorcoreEngines, Fp8StepsEngineMatchesReferenceAcrossPagesAndVerifyGroups) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  expect_fp8_steps_engine_matches({{16, 1}, {8, 2}, {4, 4}, {13, 1}, {1, 1}}, {5, 301, 130, 1000, 64, 65, 128}, 16,
                                  4);
}

// 48-row tiles (33-48 rows; the warpgroups split the latents and take the
// tiles in pairs), whatever HELIXMLA_TC_FP8_STEPS_48_ROWS says: 48 rows as
// heads or verify groups and fewer; requests shorter than a tile, odd tile
// counts (a pair's second tile past the range).
TEST(TensorcoreEngines, Fp8StepsEngineOf48RowTilesMatchesReference) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  expect_fp8_steps_engine_matches({{48, 1}, {24, 2}, {16, 3}, {40, 1}, {33, 1}}, {5, 301, 130, 1000, 64, 65, 129},
                                  48, 12);
}

// Makes KV position 0 of every request dominate: its key becomes the sum of
// the request's query rows, scaled so that each row's score for it passes
// the row's best other score by `gap` (natural-log units). Every other
// token then weighs e^-gap or less, and thousands of them together weigh
// as much as the dominant one: a kernel whose P loses such values (e4m3
// holds nothing under 2^-9) returns little more than the dominant token's V.
void dominate_first_token(SyntheticBatch& host, double gap) {
  const BatchSpec& spec = host.spec();
  const std::int64_t dim = spec.dims.head_dim();
  const double f = static_cast<double>(host.softmax_scale_) * spec.kv_scale;
  std::int64_t token = 0;
  for (std::size_t r = 0; r < host.kv_len_.size(); ++r) {
    const std::int32_t kv = host.kv_len_[r];
    const std::int64_t rows = std::int64_t{host.q_len_[r]} * spec.heads;
    const std::int64_t q0 = token * spec.heads * dim;
    token += host.q_len_[r];
    auto q = [&](std::int64_t row, std::int64_t c) {
      return static_cast<double>(load_as_float(host.q_.data(), spec.q_dtype, q0 + row * dim + c));
    };
    std::vector<double> u(dim, 0.0);
    for (std::int64_t row = 0; row < rows; ++row)
      for (std::int64_t c = 0; c < dim; ++c) u[c] += q(row, c);
    double alpha = 0.0;
    for (std::int64_t row = 0; row < rows; ++row) {
      double best = -INFINITY, toward = 0.0;
      for (std::int32_t j = 1; j < kv; ++j) {
        const std::int64_t k0 = host.pool_row(static_cast<std::int32_t>(r), j);
        double dot = 0.0;
        for (std::int64_t c = 0; c < dim; ++c) dot += q(row, c) * load_as_float(host.pool_.data(), spec.kv_dtype, k0 + c);
        best = std::max(best, dot);
      }
      for (std::int64_t c = 0; c < dim; ++c) toward += q(row, c) * u[c];
      ASSERT_GT(toward, 0.0) << "row " << row << " of request " << r;
      alpha = std::max(alpha, (best + gap / f) / toward);
    }
    const std::int64_t k0 = host.pool_row(static_cast<std::int32_t>(r), 0);
    for (std::int64_t c = 0; c < dim; ++c) {
      store_from_float(host.pool_.data(), spec.kv_dtype, k0 + c, static_cast<float>(alpha * u[c]));
    }
  }
}

// A dominant first token over a long tail about 13 log2 units below it
// (dominate_first_token): the fp8-steps engine keeps P's high part in e5m2,
// whose range reaches 2^-16, so the tail's mass stays in O.
TEST(TensorcoreEngines, Fp8StepsEngineKeepsALongTailUnderADominantToken) {
  SKIP_WITHOUT_TENSORCORE();
  for (std::int32_t heads : {16, 48}) {
    BatchSpec spec = decode_spec(heads, 1, 64, DType::fp8_e4m3);
    spec.kv_len = {8192, 3000};
    spec.generations = 2;
    SyntheticBatch host(spec);
    dominate_first_token(host, 9.0);
    expect_engine_matches(host, cuda::TensorcoreEngine::fp8_steps);
  }
}

// Scales every request's KV row at position j by 1 + growth * j / kv_len,
// so that scores, and with them each row's maximum, climb along the
// sequence. The kernels keep a reference maximum per row that moves only
// when a tile passes it by HELIXMLA_TC_RESCALE_SLACK (2^8): uniform random
// KV never makes it move after the first tile (its row maxima stay within
// ~2 exp2 units of the first tile's), so without this the rescale of O and
// the stats' correction to the true maximum would go untested.
void grow_keys_along_sequence(SyntheticBatch& host, float growth) {
  const BatchSpec& spec = host.spec();
  const std::int64_t dim = spec.dims.head_dim();
  for (std::size_t r = 0; r < host.kv_len_.size(); ++r) {
    const std::int32_t kv = host.kv_len_[r];
    for (std::int32_t j = 0; j < kv; ++j) {
      const std::int64_t row = host.pool_row(static_cast<std::int32_t>(r), j);
      const float factor = 1.0f + growth * static_cast<float>(j) / static_cast<float>(kv);
      for (std::int64_t c = 0; c < dim; ++c) {
        store_from_float(host.pool_.data(), spec.kv_dtype, row + c,
                         load_as_float(host.pool_.data(), spec.kv_dtype, row + c) * factor);
      }
    }
  }
}

// How many times head 0 of request `r`'s last query token moves its
// reference maximum after the first 32-token tile, replaying the kernels'
// rule on the host data (exp2 units, slack 8): the test below must make it
// move, or it checks nothing new.
int reference_moves(const SyntheticBatch& host, std::size_t r) {
  const BatchSpec& spec = host.spec();
  const std::int64_t dim = spec.dims.head_dim();
  std::int64_t token = 0;
  for (std::size_t i = 0; i < r; ++i) token += host.q_len_[i];
  token += host.q_len_[r] - 1;  // sees the whole KV
  const std::int32_t kv = host.kv_len_[r];
  double reference = -INFINITY;
  int moves = 0;
  for (std::int32_t tile = 0; tile * 32 < kv; ++tile) {
    double tile_max = -INFINITY;
    for (std::int32_t j = tile * 32; j < std::min(kv, tile * 32 + 32); ++j) {
      const std::int64_t row = host.pool_row(static_cast<std::int32_t>(r), j);
      double dot = 0.0;
      for (std::int64_t c = 0; c < dim; ++c) {
        dot += static_cast<double>(load_as_float(host.q_.data(), spec.q_dtype, token * spec.heads * dim + c)) *
               load_as_float(host.pool_.data(), spec.kv_dtype, row + c);
      }
      tile_max = std::max(tile_max, dot * spec.kv_scale * host.softmax_scale_ * 1.4426950408889634);
    }
    if (tile_max > reference + 8.0) {
      moves += tile > 0 ? 1 : 0;
      reference = tile_max;
    }
  }
  return moves;
}

TEST(TensorcoreLazyRescale, RowMaximaClimbingAlongTheSequenceMatch) {
  SKIP_WITHOUT_TENSORCORE();
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    // fp8 stores up to 16 (scale 1/16); 21 times that stays inside e4m3's 448.
    const float growth = kv == DType::fp8_e4m3 ? 20.0f : 24.0f;
    for (std::int32_t heads : {16, 24, 48, 128}) {  // row tiles of 16, 32 and 64 (both engines)
      for (std::int32_t page : {1, 64}) {
        BatchSpec spec = decode_spec(heads, 2, page, kv);
        spec.kv_len = {5, 301, 1030};
        SyntheticBatch host(spec);
        grow_keys_along_sequence(host, growth);
        EXPECT_GE(reference_moves(host, 2), 2) << label_of(spec) << ": the data does not move the reference";
        expect_parity(host, label_of(spec) + " climbing maxima");
      }
    }
    // Splits each start a reference of their own; the combine meets their stats.
    BatchSpec spec = decode_spec(48, 1, 64, kv);
    spec.generations = 2;
    spec.kv_len = {12000, 40};
    SyntheticBatch host(spec);
    grow_keys_along_sequence(host, growth);
    EXPECT_GE(reference_moves(host, 0), 2) << label_of(spec);
    const RunInfo info = expect_parity(host, label_of(spec) + " climbing maxima split");
    EXPECT_TRUE(info.any_split) << label_of(spec) << ": the plan did not split";
  }
}

// The same climbing maxima on the fp8-steps engine's 48-row tiles, forced
// (the block agrees on each row's reference maximum over a pair of tiles),
// whole and split.
TEST(TensorcoreLazyRescale, RowMaximaClimbingOn48RowFp8StepsTilesMatch) {
  SKIP_WITHOUT_TENSORCORE();
  if (!Environment::detect().nvrtc) GTEST_SKIP() << "no NVRTC";
  for (const auto& [heads, q_len] : {std::pair{48, 1}, std::pair{24, 2}}) {
    BatchSpec spec = decode_spec(heads, q_len, 64, DType::fp8_e4m3);
    spec.kv_len = {5, 301, 1030, 12000};
    spec.generations = 4;
    SyntheticBatch host(spec);
    grow_keys_along_sequence(host, 20.0f);
    EXPECT_GE(reference_moves(host, 2), 2) << label_of(spec) << ": the data does not move the reference";
    expect_engine_matches(host, cuda::TensorcoreEngine::fp8_steps);
  }
}

TEST(TensorcoreHelix, PerTokenBoundsAndStats) {
  SKIP_WITHOUT_TENSORCORE();
  for (std::int32_t heads : {16, 48, 128}) {
    for (std::int32_t page : {16, 64}) {
      BatchSpec spec = decode_spec(heads, 4, page, heads == 48 ? DType::fp8_e4m3 : DType::bf16);
      spec.kv_len = {70, 1000, 3};
      SyntheticBatch host(spec);
      std::vector<std::int32_t> bounds;
      for (std::int32_t r = 0; r < 3; ++r) {
        for (std::int32_t t = 0; t < 4; ++t) {
          const std::int32_t kv = host.kv_len_[r];
          bounds.push_back(t < 2 ? 0 : std::min(kv, kv / 2 + 7 * t));  // non-decreasing
        }
      }
      DeviceBatch device(host);
      TestStream stream;
      Problem p = device.problem();
      p.helix.cp_size = 2;
      p.helix.cp_rank = 1;
      p.helix.token_kv_bounds = bounds;
      device.poison_outputs();
      check_cuda(cudaDeviceSynchronize(), "poison");
      ASSERT_NO_THROW(run_tensorcore(p, stream.get())) << label_of(spec);
      device.download_outputs();
      expect_matches_reference(host, label_of(spec) + " helix", p.helix);
    }
  }
}

// A rank that holds none of a request's pages yet has local kv_len 0; single
// tokens need no bounds there (the plain mask sees the whole local KV). Small
// and large batches, so that every engine the catalog picks meets empty rows.
TEST(TensorcoreHelix, SingleTokensOfARankHoldingNothingNeedNoBounds) {
  SKIP_WITHOUT_TENSORCORE();
  for (std::int32_t heads : {16, 48, 128}) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      for (std::int32_t generations : {4, 32}) {
        BatchSpec spec = decode_spec(heads, 1, 64, kv);
        spec.generations = generations;
        spec.kv_len = {0, 1000, 0, 70};
        SyntheticBatch host(spec);
        DeviceBatch device(host);
        TestStream stream;
        Problem p = device.problem();
        p.helix.cp_size = 2;
        p.helix.cp_rank = 1;
        device.poison_outputs();
        check_cuda(cudaDeviceSynchronize(), "poison");
        ASSERT_NO_THROW(run_tensorcore(p, stream.get())) << label_of(spec);
        device.download_outputs();
        expect_matches_reference(host, label_of(spec) + " helix, no bounds", p.helix);
      }
    }
  }
}

TEST(TensorcoreSplitKv, FewLongRequestsAreSplitAndCombined) {
  SKIP_WITHOUT_TENSORCORE();
  struct Case {
    std::int32_t heads, q_len;
    std::vector<std::int32_t> kv_len;
    DType kv;
  };
  const Case cases[] = {{128, 1, {20000}, DType::bf16},
                        {16, 2, {9000, 17, 30000}, DType::bf16},
                        {48, 1, {12000, 40}, DType::fp8_e4m3},
                        {24, 4, {6000}, DType::bf16}};
  for (const Case& c : cases) {
    BatchSpec spec = decode_spec(c.heads, c.q_len, 64, c.kv);
    spec.generations = static_cast<std::int32_t>(c.kv_len.size());
    spec.kv_len = c.kv_len;
    SyntheticBatch host(spec);
    const RunInfo info = expect_parity(host, label_of(spec) + " split");
    EXPECT_TRUE(info.any_split) << label_of(spec) << ": the plan did not split";
  }
}

// One long request among short ones: the long one is split many ways (the
// combine's wide shape), short ones a few, all in one combine.
TEST(TensorcoreSplitKv, OneLongRequestAmongShortOnesIsSplitEvenly) {
  SKIP_WITHOUT_TENSORCORE();
  for (const auto& [heads, kv] : {std::pair{16, DType::bf16}, std::pair{48, DType::fp8_e4m3}}) {
    BatchSpec spec = decode_spec(heads, 1, 64, kv);
    spec.generations = 40;
    spec.kv_len = {60000};
    for (std::int32_t i = 1; i < spec.generations; ++i) spec.kv_len.push_back(300 + 37 * i);
    SyntheticBatch host(spec);
    const RunInfo info = expect_parity(host, label_of(spec) + " one long request");
    EXPECT_GE(info.most_splits, cuda::kSplitCombineWideFromSplits) << label_of(spec);
    EXPECT_LT(info.fewest_splits, cuda::kSplitCombineWideFromSplits) << label_of(spec);
  }
}

// One NaN code in the KV of a long request: the unsplit softmax gives NaN in
// every output and in l, so the split run must too. The combine once
// dropped the split that read it (l NaN) and returned a finite answer.
TEST(TensorcoreSplitKv, NanInTheKvOfOneSplitReachesEveryOutput) {
  SKIP_WITHOUT_TENSORCORE();
  for (const auto& [heads, kv] : {std::pair{16, DType::bf16}, std::pair{48, DType::fp8_e4m3},
                                  std::pair{128, DType::bf16}, std::pair{128, DType::fp8_e4m3}}) {
    BatchSpec spec = decode_spec(heads, 1, 64, kv);
    spec.generations = 1;
    spec.kv_len = {20000};
    SyntheticBatch host(spec);
    put_nan_in_kv(host, 12345);
    DeviceBatch device(host);
    poison_outputs_finite(device.problem(), host);
    TestStream stream;
    const RunInfo info = run_tensorcore(device.problem(), stream.get());
    EXPECT_TRUE(info.any_split) << label_of(spec) << ": the plan did not split";
    device.download_outputs();
    expect_first_request_nan(host, label_of(spec));
  }
}

// The same NaN in a request of 16 rows on the seesaw engine, one of 16
// requests (its batch threshold), each split; and unsplit, 128 requests.
TEST(TensorcoreSplitKv, NanInTheKvReachesEveryOutputOnTheSeesawEngine) {
  SKIP_WITHOUT_TENSORCORE();
  for (const std::int32_t generations : {16, 128}) {
    BatchSpec spec = decode_spec(64, 1, 64, DType::bf16);
    spec.generations = generations;
    spec.kv_len = {generations == 16 ? 20000 : 600};
    SyntheticBatch host(spec);
    put_nan_in_kv(host, 333);
    DeviceBatch device(host);
    poison_outputs_finite(device.problem(), host);
    TestStream stream;
    run_tensorcore(device.problem(), stream.get());
    device.download_outputs();
    expect_first_request_nan(host, label_of(spec));
  }
}

// A prefix cache: requests list the same leading pages, so blocks of
// different requests read one page; the long pair is split.
TEST(TensorcorePrefixCache, RequestsSharingLeadingPagesMatch) {
  SKIP_WITHOUT_TENSORCORE();
  for (std::int32_t heads : {16, 48, 128}) {
    for (std::int32_t page : {16, 64}) {
      for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
        BatchSpec spec = decode_spec(heads, heads == 16 ? 2 : 1, page, kv);
        spec.generations = 5;
        spec.kv_len = {1500, 1700, 1000, 2100, 1501};
        spec.shared_prefix_pages = 1000 / page;
        SyntheticBatch host(spec);
        expect_parity(host, label_of(spec) + " prefix cache");
      }
    }
  }
  BatchSpec spec = decode_spec(128, 1, 64, DType::bf16);
  spec.generations = 2;
  spec.kv_len = {30000, 30017};
  spec.shared_prefix_pages = 400;
  SyntheticBatch host(spec);
  EXPECT_TRUE(expect_parity(host, label_of(spec) + " prefix cache").any_split) << "the plan did not split";
}

// An engine's cache is tens of GiB: pages past 2^31 and 2^32 bytes into the
// pool must be addressed in 64 bits, by per-row copies and tensor maps alike
// (64 heads on 64-token pages in a batch of 16 take the seesaw engine's
// tensor-map path; the others its siblings' per-row copies).
TEST(TensorcoreLargePool, PagesPastFourGiBMatch) {
  SKIP_WITHOUT_TENSORCORE();
  constexpr std::int64_t kFourGiB = std::int64_t{1} << 32;
  for (const auto& [heads, page, kv] : {std::tuple{64, 64, DType::bf16}, std::tuple{48, 64, DType::fp8_e4m3},
                                         std::tuple{16, 16, DType::bf16}, std::tuple{128, 32, DType::fp8_e4m3}}) {
    BatchSpec spec = decode_spec(heads, 1, page, kv);
    spec.generations = 16;
    spec.kv_len = {300, 1000, 77};
    grow_pool_past(spec, kFourGiB + kFourGiB / 16);
    SyntheticBatch host(spec);
    ASSERT_GT(rows_read_past(host, kFourGiB), 0) << label_of(spec);
    ASSERT_LT(rows_read_past(host, kFourGiB / 2), rows_read_past(host, 0)) << label_of(spec);
    expect_parity(host, label_of(spec) + " pool past 4 GiB");
  }
}

TEST(TensorcoreMixed, ContextAndGenerationPhasesBothRun) {
  SKIP_WITHOUT_TENSORCORE();
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    BatchSpec spec = decode_spec(24, 2, 16, kv);
    spec.contexts = 2;
    spec.context_len = 70;
    SyntheticBatch host(spec);
    const RunInfo info = expect_parity(host, label_of(spec));
    EXPECT_EQ(info.phases, 2);
  }
}

TEST(TensorcoreWorkspace, CallerWorkspaceIsUsedAndSizeChecked) {
  SKIP_WITHOUT_TENSORCORE();
  BatchSpec spec = decode_spec(128, 1, 64, DType::bf16);
  spec.generations = 1;
  spec.kv_len = {20000};
  SyntheticBatch host(spec);
  DeviceBatch device(host);
  TestStream stream;
  const Problem p = device.problem();
  const BackendPtr backend = cuda::make_tensorcore_backend();
  const std::size_t bytes = backend->workspace_bytes(p);
  ASSERT_GT(bytes, 0u);
  DeviceBuffer workspace(bytes);
  EXPECT_THROW(backend->prepare(p, Workspace{workspace.data(), bytes - 1}, stream.get()), InvalidArgument);
  device.poison_outputs();
  check_cuda(cudaDeviceSynchronize(), "poison");
  auto run = backend->prepare(p, Workspace{workspace.data(), bytes}, stream.get());
  run->enqueue(stream.get());
  stream.synchronize();
  device.download_outputs();
  expect_matches_reference(host, "caller workspace");
}

TEST(TensorcoreGraphReplay, CapturedRunReplaysCorrectly) {
  SKIP_WITHOUT_TENSORCORE();
  for (std::int32_t page : {64, 48}) {
    BatchSpec spec = decode_spec(48, 2, page, DType::bf16);
    spec.generations = 2;
    spec.kv_len = {9000, 300};  // split and unsplit rows in one graph
    SyntheticBatch host(spec);
    DeviceBatch device(host);
    TestStream stream;
    RunInfo info;
    auto runs = prepare_all(device.problem(), stream.get(), &info);
    EXPECT_TRUE(info.any_split);
    stream.synchronize();  // metadata uploads land before capture

    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
    for (auto& run : runs) run->enqueue(stream.get());
    check_cuda(cudaStreamEndCapture(stream.get(), &graph), "end capture");
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    for (int replay = 0; replay < 2; ++replay) {
      device.poison_outputs();
      check_cuda(cudaDeviceSynchronize(), "poison");
      check_cuda(cudaGraphLaunch(exec, stream.get()), "graph launch");
      stream.synchronize();
      device.download_outputs();
      expect_matches_reference(host, label_of(spec) + " replay " + std::to_string(replay));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// A small, fast subset for compute-sanitizer memcheck and racecheck: every
// row tile, fp8 widening (16, 32 and 64 rows), the 64-row wgmma engine at
// whole-tile pages and at page 1 (page ids widened at the copy), a JIT page
// size, splits and Helix-empty rows.
TEST(TensorcoreSanitize, SmallRepresentativeShapes) {
  SKIP_WITHOUT_TENSORCORE();
  const std::tuple<std::int32_t, std::int32_t, std::int32_t, DType> shapes[] = {
      {16, 1, 64, DType::bf16}, {16, 1, 64, DType::fp8_e4m3}, {24, 1, 16, DType::fp8_e4m3},
      {48, 2, 32, DType::bf16}, {48, 1, 1, DType::bf16},
      {128, 1, 128, DType::fp8_e4m3}, {5, 3, 1, DType::bf16}};
  for (const auto& [heads, q_len, page, kv] : shapes) {
    BatchSpec spec = decode_spec(heads, q_len, page, kv);
    spec.generations = 2;
    spec.kv_len = {700, 72};  // 72: an odd tile count (two-tile steps)
    SyntheticBatch host(spec);
    expect_parity(host, label_of(spec));
  }
  // The 32-row fp8 two-block build (big batches only).
  BatchSpec spec = decode_spec(24, 1, 64, DType::fp8_e4m3);
  spec.generations = cuda::kTwoBlocks32RowFp8FromBatch;
  spec.kv_len = {700, 72};
  SyntheticBatch host(spec);
  EXPECT_TRUE(expect_parity(host, label_of(spec)).any_two_blocks);
  // 17-32 rows of 16-bit KV padded onto the 64-row wgmma tile (big batches
  // only): rows 32-63 of each tile are zero-filled and never stored.
  BatchSpec padded = decode_spec(16, 2, 64, DType::bf16);
  padded.generations = cuda::kWgmmaFor32RowsFromBatch;
  padded.kv_len = {700, 72};
  SyntheticBatch padded_host(padded);
  EXPECT_EQ(expect_parity(padded_host, label_of(padded)).any_wgmma, cuda::kTensorcoreWgmmaFor64Rows);
}

}  // namespace
}  // namespace helixmla::testing

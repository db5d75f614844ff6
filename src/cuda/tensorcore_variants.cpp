#include "cuda/tensorcore_variants.hpp"

#include <algorithm>

#include "cuda/tensorcore_kernel.cuh"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

bool TensorcoreVariant::precompiled() const {
  const bool page = std::find(kTensorcorePrecompiledPages.begin(), kTensorcorePrecompiledPages.end(),
                              page_size) != kTensorcorePrecompiledPages.end();
  bool built = false;
  switch (engine) {
    case TensorcoreEngine::seesaw: built = tensorcore_has_seesaw_build(rows, kv_dtype); break;
    case TensorcoreEngine::fp8_steps: built = tensorcore_has_fp8_steps_build(rows, kv_dtype); break;
    default: built = engine == tensorcore_default_engine(rows) && rows != kTensorcoreFp8StepsWideRows; break;
  }
  return page && q_dtype == DType::bf16 && (kv_dtype == DType::bf16 || kv_dtype == DType::fp8_e4m3) && built &&
         (!two_blocks || tensorcore_has_two_block_build(rows, kv_dtype));
}

int TensorcoreVariant::elem_kind() const {
  return q_dtype == DType::fp16 ? helixmla_tc::kElemFp16 : helixmla_tc::kElemBf16;
}

int TensorcoreVariant::kv_kind() const {
  return kv_dtype == DType::fp8_e4m3 ? helixmla_tc::kKvFp8 : helixmla_tc::kKvSameAsQ;
}

bool TensorcoreVariant::reads_kv_map() const {
  return engine == TensorcoreEngine::seesaw && page_size % helixmla_tc::SeesawLayout::kTileTokens == 0;
}

static_assert(static_cast<int>(TensorcoreEngine::mma_sync) == helixmla_tc::kEngineMmaSync &&
                  static_cast<int>(TensorcoreEngine::wgmma) == helixmla_tc::kEngineWgmma &&
                  static_cast<int>(TensorcoreEngine::seesaw) == helixmla_tc::kEngineSeesaw &&
                  static_cast<int>(TensorcoreEngine::fp8_steps) == helixmla_tc::kEngineFp8Steps,
              "TensorcoreEngine numbers its engines as the kernels do");

int TensorcoreVariant::engine_kind() const { return static_cast<int>(engine); }

namespace {

// A variant's Config, handed to `f` as a value of its type. Variants built
// by hand (tests, tools) may name a build that does not exist.
template <typename F>
auto with_config(const TensorcoreVariant& v, F f) {
  using namespace helixmla_tc;
  const TensorcoreEngine engine = v.engine;
  if (v.two_blocks && (engine != TensorcoreEngine::mma_sync || !tensorcore_has_two_block_build(v.rows, v.kv_dtype))) {
    throw InvalidArgument("variant.two_blocks", -1, v.name(),
                          "only 32-row tiles with fp8 KV have a two-block build, on mma.sync");
  }
  if (engine == TensorcoreEngine::wgmma && v.rows != 64) {
    throw InvalidArgument("variant.engine", -1, v.name(), "wgmma runs 64-row tiles");
  }
  if (engine == TensorcoreEngine::seesaw && (v.rows != 64 || v.kv_kind() == kKvFp8)) {
    throw InvalidArgument("variant.engine", -1, v.name(), "the seesaw engine runs 64-row tiles of 16-bit KV");
  }
  if (engine == TensorcoreEngine::fp8_steps && !tensorcore_has_fp8_steps_build(v.rows, v.kv_dtype)) {
    throw InvalidArgument("variant.engine", -1, v.name(), "the fp8-steps engine runs 16- and 48-row tiles of fp8 KV");
  }
  if (v.rows != 16 && v.rows != 32 && v.rows != 64 && engine != TensorcoreEngine::fp8_steps) {
    throw InvalidArgument("variant.rows", -1, std::to_string(v.rows),
                          "row tiles are 16, 32 or 64 rows, or 48 on the fp8-steps engine");
  }
  const bool fp8 = v.kv_kind() == kKvFp8;
  switch (engine) {
    case TensorcoreEngine::seesaw: return f(Config<64, kKvSameAsQ, kEngineSeesaw>{});
    case TensorcoreEngine::fp8_steps:
      if (v.rows == 16) return f(Config<16, kKvFp8, kEngineFp8Steps>{});
      return f(Config<kTensorcoreFp8StepsWideRows, kKvFp8, kEngineFp8Steps>{});
    case TensorcoreEngine::wgmma:
      return fp8 ? f(Config<64, kKvFp8, kEngineWgmma>{}) : f(Config<64, kKvSameAsQ, kEngineWgmma>{});
    case TensorcoreEngine::mma_sync: break;
  }
  if (v.rows == 16) return fp8 ? f(Config<16, kKvFp8>{}) : f(Config<16, kKvSameAsQ>{});
  if (v.rows == 32) {
    if (v.two_blocks) return f(Config<32, kKvFp8, kEngineMmaSync, 2>{});
    return fp8 ? f(Config<32, kKvFp8>{}) : f(Config<32, kKvSameAsQ>{});
  }
  return fp8 ? f(Config<64, kKvFp8>{}) : f(Config<64, kKvSameAsQ>{});
}

}  // namespace

int TensorcoreVariant::smem_bytes() const {
  return with_config(*this, [](auto c) { return decltype(c)::kSmemBytes; });
}

int TensorcoreVariant::blocks_per_sm() const {
  return with_config(*this, [](auto c) { return decltype(c)::kBlocksPerSm; });
}

int TensorcoreVariant::block_threads() const {
  return with_config(*this, [](auto c) { return decltype(c)::kBlockThreads; });
}

int TensorcoreVariant::build_blocks() const { return two_blocks ? 2 : 0; }

namespace {

// The engine's part of a build's name (mma.sync's none).
std::string_view engine_suffix(TensorcoreEngine engine) {
  switch (engine) {
    case TensorcoreEngine::wgmma: return "_wgmma";
    case TensorcoreEngine::seesaw: return "_seesaw";
    case TensorcoreEngine::fp8_steps: return "_fp8steps";
    case TensorcoreEngine::mma_sync: break;
  }
  return "";
}

}  // namespace

std::string TensorcoreVariant::name() const { return name_for_page(std::to_string(page_size)); }

std::string TensorcoreVariant::name_for_page(std::string_view page) const {
  return "tc_m" + std::to_string(rows) + "_p" + std::string(page) + "_" + std::string(to_string(q_dtype)) + "_" +
         std::string(to_string(kv_dtype)) + std::string(engine_suffix(engine)) + (two_blocks ? "_2blocks" : "");
}

// Block slots per SM the plan fills (A/B builds, CMake's HELIXMLA_TC_KNOBS):
// 0 takes as many as the kernel fits. The plan counts every slot as equally
// fast, so a kernel of two blocks per SM gets small batches split twice as
// finely as one of one block, though a block alone on its SM runs faster;
// 1 measures that kernel planned as if it held one (session 15: for the
// two-block 32-row fp8 build, no better than the one-block build at small
// batches; bench/RESULTS.md).
#ifndef HELIXMLA_TC_PLAN_SLOTS_PER_SM
#define HELIXMLA_TC_PLAN_SLOTS_PER_SM 0
#endif

std::int32_t tensorcore_block_slots(std::int32_t sm_count, const TensorcoreVariant& variant) {
  const int per_sm = HELIXMLA_TC_PLAN_SLOTS_PER_SM > 0 ? HELIXMLA_TC_PLAN_SLOTS_PER_SM : variant.blocks_per_sm();
  return sm_count * per_sm;
}

std::int32_t tensorcore_row_tile(std::int32_t heads, std::int32_t q_len, DType kv_dtype,
                                 std::int32_t batch_bucket) {
  if (q_len <= 0) return 64;
  const std::int64_t rows = std::int64_t{heads} * q_len;
  if (tensorcore_uses_48_row_tiles(rows, kv_dtype)) return kTensorcoreFp8StepsWideRows;
  for (std::int32_t tile : kTensorcoreRowTiles) {
    if (rows > tile) continue;
    const bool padded_wgmma = tile == 32 && tensorcore_uses_wgmma(64) && kv_dtype != DType::fp8_e4m3 &&
                              batch_bucket >= kWgmmaFor32RowsFromBatch;
    return padded_wgmma ? 64 : tile;
  }
  return 64;
}

TensorcoreVariant tensorcore_variant(std::int32_t heads, std::int32_t q_len, std::int32_t page_size,
                                     DType q_dtype, DType kv_dtype, std::int32_t batch_bucket) {
  TensorcoreVariant v;
  v.rows = tensorcore_row_tile(heads, q_len, kv_dtype, batch_bucket);
  v.page_size = page_size;
  v.q_dtype = q_dtype;
  v.kv_dtype = kv_dtype;
  v.engine = tensorcore_uses_seesaw(v.rows, kv_dtype, batch_bucket) ? TensorcoreEngine::seesaw
             : tensorcore_uses_fp8_steps(v.rows, kv_dtype)                ? TensorcoreEngine::fp8_steps
                                                                          : tensorcore_default_engine(v.rows);
  v.two_blocks = tensorcore_has_two_block_build(v.rows, kv_dtype) && batch_bucket >= kTwoBlocks32RowFp8FromBatch;
  return v;
}

bool tensorcore_fp8_steps_enabled() { return HELIXMLA_TC_FP8_STEPS != 0; }
bool tensorcore_48_row_tiles_enabled() {
  return tensorcore_uses_48_row_tiles(kTensorcoreFp8StepsWideRows, DType::fp8_e4m3);
}

TensorcoreVariant tensorcore_variant_for(const PhaseShape& shape) {
  return tensorcore_variant(shape.num_heads, shape.q_len, shape.page_size, shape.q_dtype, shape.kv_dtype,
                            shape.batch_bucket);
}

}  // namespace helixmla::cuda

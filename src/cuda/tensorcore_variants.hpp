// Which tensor-core kernel variant runs a shape, and which variants are
// compiled into the library. Pure functions of the shape: no CUDA calls, so
// the catalog answers the same in a sweep on a machine without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "helixmla/backend.hpp"
#include "helixmla/dtype.hpp"

namespace helixmla::cuda {

// Precompiled page sizes (the others are compiled just in time), and the
// dtype pairs they are precompiled for: bf16 Q with bf16 or fp8 KV.
inline constexpr std::array<std::int32_t, 4> kTensorcorePrecompiledPages = {16, 32, 64, 128};
inline constexpr std::array<std::int32_t, 3> kTensorcoreRowTiles = {16, 32, 64};
// 64-row tiles run on wgmma (sm_90a warpgroup MMA); 16- and 32-row tiles,
// which a 64-row wgmma would pad, run on mma.sync (but see
// kWgmmaFor32RowsFromBatch below).
inline constexpr bool kTensorcoreWgmmaFor64Rows = true;

// Whether a row tile's kernel runs on wgmma (its default engine).
constexpr bool tensorcore_uses_wgmma(std::int32_t rows) { return rows == 64 && kTensorcoreWgmmaFor64Rows; }
// 64-row tiles of 16-bit KV have a second wgmma build, the seesaw engine
// (FlashMLA's layout: tensorcore/decode_tile_seesaw.cuh). fp8 KV
// keeps the wgmma engine with its producer warpgroup.
constexpr bool tensorcore_has_seesaw_build(std::int32_t rows, DType kv_dtype) {
  return tensorcore_uses_wgmma(rows) && kv_dtype != DType::fp8_e4m3;
}
// Which of the two runs a phase at a batch bucket: the seesaw engine from
// HELIXMLA_TC_SEESAW_FROM_BATCH requests on (an A/B knob), for requests of
// any rows. Where a request's rows span several tiles, their blocks read
// the same KV (all but the first from L2) and the matrix steps bound them
// (suite case 1 328 -> 305 us, session 25); since its copies moved to TMA
// and refill earlier (session 27) it is also the faster engine for
// requests of one tile, which memory bounds (cases 3, 4, 6, 13, 14, 16:
// 3-7% faster than the wgmma engine). Small batches are split into short
// items, where its longer start (all of Q, then a pair's S before any
// overlap) costs more: case 8 (one request) 39 -> 44 us
// (bench/seesaw-batch-probe.csv times 1-32 requests).
#ifndef HELIXMLA_TC_SEESAW_FROM_BATCH
#define HELIXMLA_TC_SEESAW_FROM_BATCH 16
#endif
constexpr bool tensorcore_uses_seesaw(std::int32_t rows, DType kv_dtype, std::int32_t batch_bucket) {
  return tensorcore_has_seesaw_build(rows, kv_dtype) &&
         batch_bucket >= HELIXMLA_TC_SEESAW_FROM_BATCH;
}

// 16-row tiles of fp8 KV have a second build, the fp8-steps engine (wgmma
// with e4m3 operands, tokens as M: tensorcore/decode_tile_fp8_steps.cuh),
// one block per SM on 64-token tiles. It runs suite
// case 11 in 165 us against 187 on the mma.sync engine (0.58x case 5),
// and its GPU tests (TensorcoreEngines.Fp8StepsEngine*: statistics to 1e-3
// with S summed in float32 chunks, a long tail under a dominant token with
// P's high part in e5m2) pass, sanitizers clean (session 29). It was
// also faster at every batch size measured, one request (split over the
// SMs) to 128 (bench/fp8-steps-batch-probe.csv: 12-23%), so the catalog
// chooses it for every such tile; HELIXMLA_TC_FP8_STEPS=0
// keeps the mma.sync engine for an A/B.
#ifndef HELIXMLA_TC_FP8_STEPS
#define HELIXMLA_TC_FP8_STEPS 1
#endif
// Tiles of 33-48 rows of fp8 KV (suite case 10's 48 heads) have a row
// tile of their own on the same engine, 48 rows with the warpgroups
// splitting the latents (decode_tile_fp8_steps_split_latents), in place
// of the padded 64-row producer build: case 10 in 291-293 us against
// 358 (session 30), its GPU tests passing (TensorcoreEngines.
// Fp8StepsEngineOf48Row*, the climbing maxima and the long tail at 48
// heads). HELIXMLA_TC_FP8_STEPS_48_ROWS=0 keeps the producer build for an
// A/B. The 48-row tile has no other build.
#ifndef HELIXMLA_TC_FP8_STEPS_48_ROWS
#define HELIXMLA_TC_FP8_STEPS_48_ROWS 1
#endif
inline constexpr std::int32_t kTensorcoreFp8StepsWideRows = 48;
constexpr bool tensorcore_has_fp8_steps_build(std::int32_t rows, DType kv_dtype) {
  return (rows == 16 || rows == kTensorcoreFp8StepsWideRows) && kv_dtype == DType::fp8_e4m3;
}
constexpr bool tensorcore_uses_fp8_steps(std::int32_t rows, DType kv_dtype) {
  return HELIXMLA_TC_FP8_STEPS && tensorcore_has_fp8_steps_build(rows, kv_dtype);
}
// Whether a phase of `rows` rows a request (H x q_len) runs 48-row tiles.
constexpr bool tensorcore_uses_48_row_tiles(std::int64_t rows, DType kv_dtype) {
  return HELIXMLA_TC_FP8_STEPS_48_ROWS && tensorcore_uses_fp8_steps(kTensorcoreFp8StepsWideRows, kv_dtype) &&
         rows > 32 && rows <= kTensorcoreFp8StepsWideRows;
}
// HELIXMLA_TC_FP8_STEPS as the library was built (knobs reach the
// library's sources only, not a caller's).
bool tensorcore_fp8_steps_enabled();
// Whether 33-48 rows of fp8 KV run 48-row tiles, as the library was built.
bool tensorcore_48_row_tiles_enabled();

// A build's matrix engine, numbered as helixmla_tc::EngineKind.
enum class TensorcoreEngine : std::int8_t {
  mma_sync = 0,   // mma.sync, any row tile but 48
  wgmma = 1,      // wgmma, 64 rows (fp8 KV widened by a producer warpgroup)
  seesaw = 2,     // wgmma in FlashMLA's layout: 64 rows, 16-bit KV
  fp8_steps = 3,  // wgmma with e4m3 operands, tokens as M: 16 or 48 rows, fp8 KV
};
// The engine a row tile runs by default (the 64-row tiles' wgmma, else mma.sync).
constexpr TensorcoreEngine tensorcore_default_engine(std::int32_t rows) {
  return tensorcore_uses_wgmma(rows) ? TensorcoreEngine::wgmma : TensorcoreEngine::mma_sync;
}

struct TensorcoreVariant {
  std::int32_t rows = 64;  // query rows per block (16, 32 or 64; 48 on the fp8-steps engine)
  std::int32_t page_size = 64;
  DType q_dtype = DType::bf16;   // also the output and MMA input type
  DType kv_dtype = DType::bf16;  // q_dtype or fp8_e4m3
  TensorcoreEngine engine = TensorcoreEngine::mma_sync;
  bool two_blocks = false;  // mma.sync's build for two blocks per SM (32-row fp8 only; below)

  bool precompiled() const;
  int elem_kind() const;  // helixmla_tc::ElemKind
  int kv_kind() const;    // helixmla_tc::KvKind
  int smem_bytes() const;
  int blocks_per_sm() const;
  int block_threads() const;  // threads per block: 384 with a producer warpgroup, else 256
  int engine_kind() const;  // helixmla_tc::EngineKind
  int build_blocks() const;  // helixmla_tc::Config's BLOCKS: 2 for the two-block build, else 0
  // Whether the kernel reads the pool's tensor map (KvTensorMap): the seesaw
  // engine where pages hold whole 64-token tiles, its TMA copies.
  bool reads_kv_map() const;
  // e.g. "tc_m64_p64_bf16_fp8_wgmma", "tc_m64_p64_bf16_bf16_seesaw", "tc_m32_p64_bf16_fp8_2blocks",
  // "tc_m16_p64_bf16_fp8_fp8steps", "tc_m48_p64_bf16_fp8_fp8steps"
  std::string name() const;
  // The same with `page` in place of the page size (the catalog's "<any>").
  std::string name_for_page(std::string_view page) const;
  bool operator==(const TensorcoreVariant&) const = default;
};

// With 16-bit KV, tiles of 17-32 rows run padded in the 64-row wgmma kernel
// from this batch bucket on: the 32-row mma.sync kernel reached 55-70% of
// copy at batches of 16-128 where the padded wgmma tile reached 59-87%, 6%
// faster at a batch of 16 and 18-21% at 32 and 128, 14% slower at 8 (its
// fixed cost is higher; bench/RESULTS.md, sessions 14 and 15). Since
// session 27 the seesaw engine runs those 64-row tiles (tensorcore_uses_seesaw,
// whose batch threshold is this one's); not timed against the 32-row kernel
// since. fp8 KV keeps 32 rows (its 64-row kernel was 3-9% slower at 8-128
// requests).
inline constexpr std::int32_t kWgmmaFor32RowsFromBatch = 16;

// 32-row tiles with fp8 KV, the only ones with a two-block build, run it
// from this batch bucket on: 7-8% faster at 64 and 128 requests, equal at
// 32, slower below (tensorcore/config.cuh's Config; bench/RESULTS.md,
// session 15).
inline constexpr std::int32_t kTwoBlocks32RowFp8FromBatch = 64;
constexpr bool tensorcore_has_two_block_build(std::int32_t rows, DType kv_dtype) {
  return rows == 32 && kv_dtype == DType::fp8_e4m3;
}

// Block slots the work plan fills on `sm_count` SMs: blocks_per_sm() per SM
// unless an A/B build sets HELIXMLA_TC_PLAN_SLOTS_PER_SM.
std::int32_t tensorcore_block_slots(std::int32_t sm_count, const TensorcoreVariant& variant);

// Rows of a request's tile for H heads and `q_len` tokens (0 = varies: a
// context phase): the smallest of 16/32/64 that holds H * q_len, else 64,
// with 32 raised to 64 as above for `kv_dtype` and `batch_bucket` (the
// phase's, as in PhaseShape), and 48 for 33-48 rows of fp8 KV
// (tensorcore_uses_48_row_tiles).
std::int32_t tensorcore_row_tile(std::int32_t heads, std::int32_t q_len, DType kv_dtype,
                                 std::int32_t batch_bucket);

// The variant that runs a phase of H heads and `q_len` tokens (0 for a
// context phase) at a batch bucket: the one choice behind both the
// catalog's claim (tensorcore_variant_for) and the run (tensorcore_run's
// tensorcore_variant_of).
TensorcoreVariant tensorcore_variant(std::int32_t heads, std::int32_t q_len, std::int32_t page_size,
                                     DType q_dtype, DType kv_dtype, std::int32_t batch_bucket);

TensorcoreVariant tensorcore_variant_for(const PhaseShape& shape);

}  // namespace helixmla::cuda

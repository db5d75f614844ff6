// Tensor-core MLA decode kernel (DESIGN §2) and the parameter block the host
// fills for it. This file is compiled twice from the same text: by nvcc for
// the precompiled page sizes, and, embedded as a string, by NVRTC for every
// other page size. It therefore includes no headers and uses only builtin
// types and inline PTX; the host side includes it for the structs below.
//
// Design decisions
// - A block (256 threads, 8 warps; fp8 KV on wgmma adds a producer
//   warpgroup, below) owns one work item: a tile of up to M
//   query rows of one request and one KV range (the whole visible KV, or one
//   split of it). Rows are packed token-major, row = t * H + h within the
//   request, which is exactly the memory order of q, out and stats
//   ([tokens, heads, ...]): a row tile is one contiguous run of rows, and
//   each row's token (hence its mask bound) is row / H. Row tiles of 16, 32
//   or 64 (template M) follow the rows per request, H * q_len, so that 16
//   heads do not pay for 64 rows of matrix work; more rows take several
//   tiles. The host may pick a bigger tile or another build by batch size
//   (tensorcore_variants.hpp: 17-32 rows of 16-bit KV padded to 64 in big
//   batches, the two-block build of 32-row fp8, Config's BLOCKS).
// - KV tiles of 32 tokens are gathered from the page pool with 16-byte
//   cp.async (page size PAGE is a template parameter: the page lookup is a
//   multiply, not a division), 2 to 4 stages deep; tokens past the range
//   are zero-filled, so masked positions multiply finite zeros. Each thread looks
//   up its page one tile ahead, so the page-table load never stalls a copy.
// - Shared-memory rows are 128-byte blocks with the 16-byte chunks XOR-swizzled
//   by row, so every ldmatrix and every cp.async store is conflict-free.
// - Three matrix engines (template ENGINE), bf16 or fp16 in, float32 accumulate;
//   the third, the seesaw engine (64-row tiles of 16-bit KV, FlashMLA's
//   layout), is its own function, decode_tile_seesaw, described there:
//   * mma.sync.m16n8k16 (any row tile): S = Q K^T with each warp owning 16 rows
//     x 16 tokens over a share of the 576 reduction, partial sums meeting in
//     shared memory; O += P V with each warp owning 64 of the 512 V columns for
//     all M rows (V is the first 512 columns of the K tile, ldmatrix.trans).
//   * wgmma (sm_90a, 64-row tiles): the two warpgroups each compute S over
//     half of the reduction (m64n32k16, K from shared memory, Q from
//     registers for most k16 steps and from shared memory for the rest),
//     and each owns 256 of the V columns (m64n256k16, P from registers, V read
//     N-major from the same tile). The shared-memory rows above are exactly
//     the 128-byte-swizzle canonical layout wgmma descriptors describe.
//   Between the two matrix steps the online softmax runs in float32 in the
//   exp2 domain. mma.sync: S partials meet in shared memory, the softmax
//   writes P (16-bit) and each row's rescale factor there. wgmma: the two S
//   partials are swapped through shared memory in register order, and each
//   warpgroup runs the softmax on the whole tile in its own registers (the S
//   accumulator layout is P's A-operand layout), so one barrier per tile
//   less and no P round trip. Each row keeps a reference maximum that
//   moves only when a tile passes it by 2^8 (HELIXMLA_TC_RESCALE_SLACK), so
//   O's rescale is skipped on almost every tile; the stats carry the true
//   maximum, l moved to it in the epilogue.
// - fp8 e4m3 KV lands in shared memory as bytes and is widened to fp16
//   (exact: every e4m3 value is an fp16 value; one instruction per pair,
//   bf16 would take four), so its matrix steps run in fp16 whatever Q's
//   type, bf16 Q scaled by a power of two per block; the per-tensor KV
//   scale is folded into the softmax scale and the output scale. On wgmma
//   (whose operands come from shared memory) a third warpgroup, the
//   producer, copies each tile and widens it whole into one of three
//   16-bit tiles, handing it over through named barriers ("full" and
//   "empty" per widened tile), so the matrix warpgroups' loop holds no
//   copies and no conversions; setmaxnreg gives them the producer's
//   registers. mma.sync widens
//   in registers straight into its B fragments: a widened copy in shared
//   memory cost more shared-memory traffic than the 16-bit path has in all.
//   Its fp8 rows are five aligned 128-byte groups with their own chunk
//   swizzle (fp8_chunk_offset), Q's columns are reordered so that one
//   8-byte load of K feeds two k16 steps; the 16-row kernel keeps its Q
//   fragments in registers, and the 16- and 32-row kernels take two KV
//   tiles per softmax step (the 32-row two-block build one).
// - Epilogue: o / l (zero when l == 0), stats (m in natural-log units, l). A
//   split writes float32 partials in split_combine's entry layout instead.
#pragma once

namespace helixmla_tc {

// k16 steps of S per warpgroup that take Q from registers (Config::
// kQRegSteps), by KV kind; defined on the command line for A/B runs
// (scripts/gpu-check.sh variants). 16-bit KV takes 16, which leaves one
// 64-column block of Q in shared memory, because the serial loop that
// pages under 8 ran until session 12 waited on each S, whose shared-memory
// Q reads 16 steps shorten (case 16 432 -> 405-408 us, session 11; session
// 6 had found 12 best at page 64, where 16 measures the same). fp8 KV's
// matrix warpgroups have 232 registers (the producer warpgroup has the
// rest), not 255: at 16 steps ptxas serialises the wgmmas, at 12 not.
#ifndef HELIXMLA_TC_Q_REG_STEPS_16BIT
#define HELIXMLA_TC_Q_REG_STEPS_16BIT 16
#endif
#ifndef HELIXMLA_TC_Q_REG_STEPS_FP8
#define HELIXMLA_TC_Q_REG_STEPS_FP8 12
#endif

// 16-row fp8 tiles: KV stages, blocks per SM, and whether each warp keeps
// its Q fragments in registers (36 per thread) instead of reading them
// with ldmatrix every tile (A/B runs as above). Session 7 chose two stages
// and three blocks (78 registers): case 11 278 us against 291 with four
// stages and two. By session 13 the loop was bound by the shared-memory
// pipe (86% of cycles issued a wavefront; a quarter of them Q's
// fragments), and Q in registers (128 registers, so two blocks) took case
// 11 213.5 -> 209.3 us with four stages (two blocks without it: 220.1).
#ifndef HELIXMLA_TC_M16_FP8_STAGES
#define HELIXMLA_TC_M16_FP8_STAGES 4
#endif
#ifndef HELIXMLA_TC_M16_FP8_BLOCKS_PER_SM
#define HELIXMLA_TC_M16_FP8_BLOCKS_PER_SM 2
#endif
#ifndef HELIXMLA_TC_M16_FP8_Q_IN_REGISTERS
#define HELIXMLA_TC_M16_FP8_Q_IN_REGISTERS 1
#endif
// 16-row fp8: 32-token KV tiles per loop step (A/B runs as above). Each
// step costs three block barriers and a softmax round (vote, shuffles, P
// written and read); two tiles a step halve that per token, with the copies
// still issued a tile at a time and Q, kept in registers, staged in the
// ring's stages the prologue leaves empty (two blocks per SM need its 18
// KB). Case 11 209.8 -> 190.9 us (session 14); two S accumulation chains
// per n8 tile, 2% on one-tile steps, added nothing on top.
#ifndef HELIXMLA_TC_M16_FP8_TILES_PER_STEP
#define HELIXMLA_TC_M16_FP8_TILES_PER_STEP 2
#endif
// The same for 32-row fp8 tiles (17-32 rows with fp8 KV) in their one-block
// build (the two-block build, Config's BLOCKS, takes one): 16 heads x q_len
// 2 at 8, 32 and 128 requests took 4%, 7% and 8% less (373 -> 342 us at
// 128, two rounds; session 15).
#ifndef HELIXMLA_TC_M32_FP8_TILES_PER_STEP
#define HELIXMLA_TC_M32_FP8_TILES_PER_STEP 2
#endif

// 16-bit wgmma: KV stages (A/B runs as above). Five fit beside Q's 16
// register steps, but four measured as fast or faster on every 64-row case
// in two rounds (case 16 402.3 against 407.5 us, case 4 329.7 against
// 332.6; session 12), and leave 36 KB of shared memory free.
#ifndef HELIXMLA_TC_WGMMA_16BIT_STAGES
#define HELIXMLA_TC_WGMMA_16BIT_STAGES 4
#endif
// Lazy rescaling (exp2 units): a row's reference maximum moves only when a
// tile's maximum passes it by more than this, so O's rescale (and, on the
// 16-row kernel, the work around it) is skipped on almost every tile after
// the first. P stays below 2^slack, which bf16 and fp16 hold with their
// full precision. 0 rescales whenever the maximum moves.
#ifndef HELIXMLA_TC_RESCALE_SLACK
#define HELIXMLA_TC_RESCALE_SLACK 8
#endif

// Element kinds of the matrix inputs: Q (and out) type, and KV storage.
enum ElemKind { kElemBf16 = 0, kElemFp16 = 1 };
enum KvKind { kKvSameAsQ = 0, kKvFp8 = 1 };
// kEngineSeesaw: wgmma in FlashMLA's layout (decode_tile_seesaw below),
// 64-row tiles of 16-bit KV. kEngineFp8Steps: wgmma with e4m3 operands,
// tokens as M, 16-row tiles of fp8 KV (decode_tile_fp8_steps below) and
// 48-row ones (decode_tile_fp8_steps_split_latents).
enum EngineKind { kEngineMmaSync = 0, kEngineWgmma = 1, kEngineSeesaw = 2, kEngineFp8Steps = 3 };

constexpr int kThreads = 256;  // the matrix warpgroups' threads (every thread but a producer's)
// Named barriers of the producer build (fp8 KV on wgmma; 0 is
// __syncthreads'): the matrix warpgroups' own, Q's staging region (which
// the widened tiles reuse; the whole block meets there twice: once Q has
// landed, once it is free), and per widened tile "full" (the producer
// arrives, the matrix warpgroups wait) and "empty" (the other way round).
constexpr int kMatrixBarrier = 1;
constexpr int kQStagingBarrier = 2;
constexpr int kFullBarrier0 = 3;
constexpr int kEmptyBarrier0 = 6;
// Registers per thread after setmaxnreg: the matrix warpgroups take what the
// producer gives back (2 x 128 x 232 + 128 x 40 = 384 x 168, the launch's share).
constexpr int kMatrixRegisters = 232;
constexpr int kProducerRegisters = 40;
// setmaxnreg.inc waits until the block's pool has the registers: a split
// above the launch's share would hang every block. The share is what the
// launch bounds let ptxas give a 384-thread block at entry; the host checks
// each producer kernel's count against it before its first launch.
constexpr int kProducerLaunchRegisters = (65536 / 384) & ~7;
static_assert(2 * 128 * kMatrixRegisters + 128 * kProducerRegisters <= 384 * kProducerLaunchRegisters &&
                  kMatrixRegisters % 8 == 0 && kProducerRegisters % 8 == 0 && kProducerRegisters >= 24,
              "the producer build's register split fits the launch's 168 registers a thread");
constexpr int kTileTokens = 32;
constexpr int kHeadDim = 576;
constexpr int kLatent = 512;
constexpr int kRowBytes16 = kHeadDim * 2;  // one 16-bit row: 72 chunks of 16 bytes
constexpr int kChunksPerRow = kRowBytes16 / 16;

// One block's work. All indices are relative to the phase being run.
struct WorkItem {
  int token_offset;  // first packed query token of the request
  int q_len;         // query tokens of the request
  int kv_len;        // cached tokens of the request (incl. the new ones)
  int request;       // page-table row
  int row_begin;     // first row of the tile among the request's q_len * H rows
  int kv_begin;      // KV positions [kv_begin, kv_end) of this item
  int kv_end;
  int split;         // -1: the item covers the whole KV range and writes out/stats
  int splits;        // number of splits of this row tile
  int first_entry;   // split_combine entry of (tile row 0, split 0)
};

struct Params {
  const void* q;           // [tokens, H, 576]
  void* out;               // [tokens, H, 512]
  float* stats;            // [tokens, H, 2] or null
  const void* pool;        // [pages, PAGE, 576]
  const int* page_table;   // [requests, page_table_stride]
  const int* token_bounds; // [tokens] Helix per-token bounds, or null
  const WorkItem* items;
  float* partial_out;      // [entries, 512]
  float* partial_stats;    // [entries, 2]
  int page_table_stride;
  int heads;
  float scale_log2;  // softmax scale * KV scale * log2(e)
  float out_scale;   // KV scale
};

// A CUtensorMap's bytes (the driver's encoding, opaque here: NVRTC has no
// cuda.h), passed by value as every kernel's second, __grid_constant__
// parameter; only the seesaw engine's one-page-per-tile build reads it.
// A second parameter leaves the other kernels' machine code alone, where
// making Params itself __grid_constant__ did not (session 23).
struct alignas(128) KvTensorMap {
  unsigned long long words[16];
};

// The seesaw engine's shared-memory map: Q and two 64-token KV tiles, each
// nine 64-column blocks of 64 rows x 128 bytes in wgmma's 128-byte-swizzle
// layout; an mbarrier per block of each tile; per-row state.
struct SeesawLayout {
  static constexpr int kTileTokens = 64;
  static constexpr int kBlocks = kHeadDim / 64;
  static constexpr int kBlockBytes = kTileTokens * 128;
  static constexpr int kTileBytes = kBlocks * kBlockBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKvOffset = kTileBytes;
  static constexpr int kBarrierOffset = 3 * kTileBytes;
  static constexpr int kRowInfoOffset = kBarrierOffset + 2 * kBlocks * 8;
  // Per row: bound, running maximum, the two warpgroups' rescale factors, l of each.
  static constexpr int kRowInfoBytes = 6 * 64 * 4;
  static constexpr int kSmemBytes = kRowInfoOffset + kRowInfoBytes + 1024;  // + the 1024-byte alignment
  static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on sm_90");
};

// The fp8-steps engine's shared-memory map (decode_tile_fp8_steps).
struct Fp8StepsLayout {
  static constexpr int kTileTokens = 64;
  static constexpr int kRows = 16;
  static constexpr int kStages = 4;  // warpgroup w's tiles use stages w and w + 2
  static constexpr int kBlockBytes = kTileTokens * 128;
  static constexpr int kRopeOffset = 4 * kBlockBytes;  // 64 rows x 64 bytes
  static constexpr int kTileBytes = kRopeOffset + kTileTokens * 64;
  // Q': rows [0, 16) high parts, [16, 32) middle, [32, 48) low, in the
  // tile's blocks.
  static constexpr int kQParts = 3;
  static constexpr int kQBlockBytes = kQParts * kRows * 128;
  static constexpr int kQBytes = 4 * kQBlockBytes + kQParts * kRows * 64;
  static constexpr int kPBytes = kRows * 128;  // P^T of a tile: 16 rows of [64 high | 64 low] positions
  static constexpr int kQOffset = 0;
  static constexpr int kKvOffset = kQBytes;
  static constexpr int kPOffset = kKvOffset + kStages * kTileBytes;  // one per warpgroup
  static constexpr int kBarrierOffset = kPOffset + 2 * kPBytes;
  static constexpr int kRowInfoOffset = kBarrierOffset + kStages * 8;
  // Per row: S's factor; warpgroup 1's reference maximum, l and true
  // maximum; then [8 warps][16] floats of scratch.
  static constexpr int kRowInfoBytes = (4 + 8) * kRows * 4;
  static constexpr int kSmemBytes = kRowInfoOffset + kRowInfoBytes + 1024;  // + the 1024-byte alignment
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0 && kPBytes % 1024 == 0, "swizzle atoms stay aligned");
  static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on sm_90");
};

// The same engine's map for 48-row tiles (decode_tile_fp8_steps_split_latents):
// Q in two parts, four stages that both warpgroups fill, and P^T per
// (tile pair's parity, warpgroup).
struct Fp8StepsSplitLatentsLayout {
  static constexpr int kTileTokens = 64;
  static constexpr int kRows = 48;
  static constexpr int kStages = 4;  // tile t in stage t % 4
  static constexpr int kBlockBytes = kTileTokens * 128;
  static constexpr int kRopeOffset = 4 * kBlockBytes;
  static constexpr int kTileBytes = kRopeOffset + kTileTokens * 64;
  // Q': rows [0, 48) high parts, [48, 96) low, in the tile's blocks.
  static constexpr int kQParts = 2;
  static constexpr int kQBlockBytes = kQParts * kRows * 128;
  static constexpr int kQBytes = 4 * kQBlockBytes + kQParts * kRows * 64;
  static constexpr int kPBytes = kRows * 128;  // 48 rows of [64 high | 64 low] positions
  static constexpr int kQOffset = 0;
  static constexpr int kKvOffset = kQBytes;
  static constexpr int kPOffset = kKvOffset + kStages * kTileBytes;
  static constexpr int kBarrierOffset = kPOffset + 4 * kPBytes;
  static constexpr int kRowInfoOffset = kBarrierOffset + kStages * 8;
  // Per row: S's factor and KV bound; then [8 warps][48] floats of scratch.
  static constexpr int kRowInfoBytes = (2 + 8) * kRows * 4;
  static constexpr int kSmemBytes = kRowInfoOffset + kRowInfoBytes + 1024;  // + the 1024-byte alignment
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0 && kPBytes % 1024 == 0, "swizzle atoms stay aligned");
  static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on sm_90");
};

// Per-(M, KV kind, engine, build) tuning and the shared-memory map. Offsets up to
// the scratch buffers are multiples of 1024 bytes (the 128-byte swizzle
// period); the wgmma engine also aligns the base to 1024 itself.
//
// BLOCKS: the blocks per SM a build is made for, 0 for its row tile's own.
// Only 32-row fp8 tiles have a second build, of two blocks (three stages,
// one tile per step: 127 registers, no spills), which the host picks for
// big batches: one block leaves two warps per scheduler to hide the loop's
// latencies. 16 heads x q_len 2 at 8, 16, 32, 64 and 128 requests (session
// 15): 51 -> 58-62, 66 -> 82, 107 -> 106, 190 -> 176 and 343 -> 318 us.
// Small batches lose because the plan splits them twice as finely for
// twice the block slots; planned for one block per SM they still lost at
// 16 requests (69 us: a lone block of this build is the slower one).
template <int M, int KV, int ENGINE = kEngineMmaSync, int BLOCKS = 0>
struct Config {
  static_assert(ENGINE == kEngineMmaSync || ENGINE == kEngineFp8Steps || M == 64, "the wgmma engine runs 64-row tiles");
  static_assert(BLOCKS == 0 || (BLOCKS == 2 && M == 32 && KV == kKvFp8 && ENGINE == kEngineMmaSync),
                "a two-block build exists for 32-row fp8 tiles only");
  static constexpr bool kTwoBlockBuild = BLOCKS == 2;
  static constexpr bool kWgmma = ENGINE == kEngineWgmma;
  // The seesaw engine keeps its own map (SeesawLayout); the rest of this
  // Config describes the other engines.
  static constexpr bool kSeesaw = ENGINE == kEngineSeesaw;
  static_assert(!kSeesaw || (M == 64 && KV == kKvSameAsQ && BLOCKS == 0), "the seesaw engine runs 64-row 16-bit KV");
  // The fp8-steps engine keeps its own maps too (Fp8StepsLayout and
  // Fp8StepsSplitLatentsLayout, below).
  static constexpr bool kFp8Steps = ENGINE == kEngineFp8Steps;
  static_assert(!kFp8Steps || ((M == 16 || M == 48) && KV == kKvFp8 && BLOCKS == 0),
                "the fp8-steps engine runs 16- and 48-row fp8 KV");
  // fp8 KV on wgmma: a third warpgroup, the producer, after the matrix
  // threads. It issues the KV copies and widens each tile into the 16-bit
  // tiles the matrix steps read, handing them over through named barriers,
  // so the matrix warpgroups' loop holds no copies and no widening (session
  // 13 found the widening a quarter of the loop's samples and 2735 cycles a
  // tile against 2083 for 16-bit KV; session 21: case 10 410 -> 357 us).
  // setmaxnreg gives the matrix warpgroups the producer's registers.
  static constexpr bool kProducer = kWgmma && KV == kKvFp8;
  static constexpr int kBlockThreads = kProducer ? kThreads + 128 : kThreads;
  static constexpr int kMTiles = M / 16;
  static constexpr int kWarpsK = kWgmma ? 2 : 4 / kMTiles;  // partial S sums per tile
  static constexpr int kKSteps = 36 / kWarpsK;  // k16 steps per warp (warpgroup) in S = Q K^T
  // mma.sync: KV tiles per loop step (one softmax and its barriers).
  static constexpr int kTilesPerStep =
      kWgmma || KV != kKvFp8 ? 1
                             : (M == 16   ? HELIXMLA_TC_M16_FP8_TILES_PER_STEP
                                : M == 32 ? (kTwoBlockBuild ? 1 : HELIXMLA_TC_M32_FP8_TILES_PER_STEP)
                                          : 1);
  static_assert(kTilesPerStep == 1 || kTilesPerStep == 2, "one or two tiles per step");
  static constexpr int kStepTokens = kTilesPerStep * kTileTokens;
  static constexpr int kRowThreads = kThreads / M;                   // softmax threads per row
  static constexpr int kRowTokens = kStepTokens / kRowThreads;       // tokens per softmax thread
  // 16-row fp8 mma.sync: each warp keeps its Q fragments in registers.
  static constexpr bool kQInRegisters = !kWgmma && KV == kKvFp8 && M == 16 && HELIXMLA_TC_M16_FP8_Q_IN_REGISTERS;
  // wgmma: the first k16 steps of each warpgroup's S take Q from registers
  // (4 per step per thread): an m64n32k16 with both operands in shared
  // memory reads 3 KB per 16 tensor-core cycles, more than the 128 bytes a
  // cycle shared memory delivers; from registers it reads 1 KB. Those Q
  // columns (whole 64-column blocks: the two warpgroups take alternate
  // steps) are never stored in shared memory, which makes room for a
  // fourth 16-bit KV stage (a fifth would fit, see the knob) and for fp8's
  // three raw stages beside its three widened tiles.
  static constexpr int kQRegSteps =
      kWgmma ? (KV == kKvFp8 ? HELIXMLA_TC_Q_REG_STEPS_FP8 : HELIXMLA_TC_Q_REG_STEPS_16BIT) : 0;
  static_assert(kQRegSteps % 2 == 0 && kQRegSteps <= 36 / kWarpsK, "Q registers cover whole 64-column blocks");
  static constexpr int kQRegBlocks = kQRegSteps / 2;
  static constexpr int kStages =
      M == 16   ? (KV == kKvFp8 ? HELIXMLA_TC_M16_FP8_STAGES : 2)
      : M == 32 ? (kTwoBlockBuild ? 3 : 4)
      : kWgmma  ? (KV == kKvFp8 ? 3 : HELIXMLA_TC_WGMMA_16BIT_STAGES)
                : (KV == kKvFp8 ? 4 : 3);
  static constexpr int kBlocksPerSm =
      kFp8Steps ? 1 : M == 16 ? (KV == kKvFp8 ? HELIXMLA_TC_M16_FP8_BLOCKS_PER_SM : 2) : (kTwoBlockBuild ? 2 : 1);
  static_assert(kStages >= 2 * kTilesPerStep, "the ring holds a step's tiles and the next step's copies");
  static constexpr int kSStride = kStepTokens + 8;  // floats; keeps S stores conflict-free

  static constexpr int kQBytes = M * (kRowBytes16 - kQRegBlocks * 128);
  static constexpr int kTileBytes16 = kTileTokens * kRowBytes16;
  // fp8 rows in a stage. mma.sync reads its B fragments straight from the
  // bytes (4 or 8 per load, see decode_tile) and keeps each row in five
  // whole 128-byte groups, chunks swizzled within them (fp8_chunk_offset).
  static constexpr int kFp8RowBytes = kWgmma ? kHeadDim : 5 * 128;
  static constexpr int kStageBytes = KV == kKvFp8 ? kTileTokens * kFp8RowBytes : kTileBytes16;
  // wgmma: the S halves swap through shared memory, 16 floats per thread,
  // through two buffers by tile parity (the loop has one
  // barrier per tile, so a fast thread's next swap must not overwrite what
  // a slow thread of the other warpgroup has yet to read).
  static constexpr int kSwapBytes = kThreads * 16 * 4;
  static constexpr int kSBytes = kWgmma ? 2 * kSwapBytes : kWarpsK * M * kSStride * 4;
  // mma.sync's P tile; wgmma keeps P in registers.
  static constexpr int kPBytes = kWgmma ? 0 : M * kStepTokens * 2;
  // Q in registers after the prologue, with steps of several tiles: Q is
  // staged in the last stages of the ring, which the prologue leaves empty
  // and the first step's copies fill only past the loop's first barrier.
  static constexpr bool kQInStages = kQInRegisters && kTilesPerStep > 1;
  static constexpr int kQOffset = kQInStages ? (kStages - kTilesPerStep) * kStageBytes : 0;
  static constexpr int kStageOffset = kQInStages ? 0 : kQBytes;
  // fp8 widened tiles (wgmma only: mma.sync widens into its fragments):
  // tiles it (P V), it + 1 (S) and it + 2 (being widened).
  static constexpr int kWideTiles = KV == kKvFp8 && kWgmma ? 3 : 0;
  static_assert(!kProducer || (kFullBarrier0 + kWideTiles <= kEmptyBarrier0 && kEmptyBarrier0 + kWideTiles <= 16),
                "a full and an empty named barrier per widened tile");
  static constexpr int kWideOffset = kStageOffset + kStages * kStageBytes;
  static_assert(!kQInStages || kQBytes <= kTilesPerStep * kStageBytes, "Q's staging fits the empty stages");
  static constexpr int kSOffset = kWideOffset + kWideTiles * kTileBytes16;
  static constexpr int kPOffset = kSOffset + kSBytes;
  static constexpr int kRowInfoOffset = kPOffset + kPBytes;
  // Per row: rescale factor, KV bound, reference maximum, l, true maximum;
  // then mma.sync's rescale-tile word (16 bytes keep the alignment).
  static constexpr int kRowInfoBytes = 5 * M * 4 + 16;
  static constexpr int kSmemBytes = kSeesaw     ? SeesawLayout::kSmemBytes
                                    : kFp8Steps ? (M == 16 ? Fp8StepsLayout::kSmemBytes
                                                           : Fp8StepsSplitLatentsLayout::kSmemBytes)
                                                : kRowInfoOffset + kRowInfoBytes + (kWgmma ? 1024 : 0);
  // wgmma: Q's register columns pass once through shared memory (16-byte
  // copies with the rest of Q, then ldmatrix into the A layout), in a region
  // no tile uses before the loop's first barrier: the last KV stage (the
  // prologue leaves it empty) and the S-swap buffers after it, or fp8's
  // widened tiles (handed to the producer by barrier kQStagingBarrier).
  // Four-byte global loads straight into the A layout (48 per thread) filled
  // the load queue (ncu, session 7) and cost 4% on blocks of 2 to 32 tiles
  // (session 9).
  static constexpr int kQStageBytes = M * 128 * kQRegBlocks;
  static constexpr int kQStageOffset = KV == kKvFp8 ? kWideOffset : kStageOffset + (kStages - 1) * kStageBytes;
  static_assert(kQStageOffset + kQStageBytes <= kRowInfoOffset, "Q's staging fits before the row information");
  static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on sm_90");
  static_assert(kBlocksPerSm == 1 || kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "the blocks an SM should hold fit its shared memory");
};

#if defined(__CUDACC__)

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile of `rows` rows:
// chunks are grouped eight to a 128-byte block row, blocks of all rows first.
__device__ __forceinline__ int swizzled(int rows, int r, int c) {
  return (c >> 3) * (rows * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}

// Byte offset of 16-byte chunk `c` of row `r` in an fp8 stage. wgmma widens
// rows as they are (576 bytes). mma.sync's rows are 640 bytes, every 128-byte
// group aligned, so each warp's copy of eight chunks per row fills whole
// groups (592-byte rows made 2.3 shared-memory wavefronts per ideal one,
// 45% of the 16-row kernel's shared-memory traffic; ncu, session 11); the
// chunks of a group are XOR-swizzled by fp8_swizzle(r), which keeps the
// 4- and 8-byte fragment loads of decode_tile conflict-free: the swizzles
// of rows 4i .. 4i + 3 differ in bits 1-2 (8-byte loads of K, rows g of a
// half-warp), so do those of the rows of one parity among eight (8-byte
// loads of V, rows 2 c4), and all eight differ (4-byte loads).
__device__ __forceinline__ int fp8_swizzle(int r) { return (r ^ ((r & 1) << 2)) & 7; }
template <bool WGMMA>
__device__ __forceinline__ int fp8_chunk_offset(int r, int c) {
  if constexpr (WGMMA) {
    return r * kHeadDim + c * 16;
  } else {
    return r * (5 * 128) + (c >> 3) * 128 + (((c & 7) ^ fp8_swizzle(r)) << 4);
  }
}

// P tile: rows of TOKENS 16-bit values, swizzled for ldmatrix.
template <int TOKENS>
__device__ __forceinline__ int p_offset(int r, int c) {
  static_assert(TOKENS == 32 || TOKENS == 64, "P rows of 32 or 64 tokens");
  if constexpr (TOKENS == 32) return r * 64 + ((c ^ ((r >> 1) & 3)) << 4);
  return r * 128 + ((c ^ (r & 7)) << 4);
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const void* p) { ldmatrix_x4_trans(r, smem_addr(p)); }
// The inverse of ldmatrix_x4_trans: lane 8 i + r gives the address of row
// r of matrix i, and register i of lane 4 g + c holds that matrix's
// elements (2 c, g) and (2 c + 1, g), the first in the low half.
__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

template <int ELEM>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (ELEM == kElemBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats to a packed pair of the MMA type; `lo` lands in the low half.
template <int ELEM>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (ELEM == kElemBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// Four e4m3 values (low byte first) to two packed fp16 pairs, exactly, one
// instruction each: bytes 0-1 to `lo`, bytes 2-3 to `hi`. The reason fp8 KV
// runs its matrix steps in fp16. The 16-bit inputs are the word's register
// halves, so no mask or shift comes before the conversions.
__device__ __forceinline__ void widen_fp8x4(u32 four_bytes, u32& lo, u32& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(four_bytes));
}

// prmt: byte i of the result is byte (sel >> 4 i) & 7 of {hi:lo}.
__device__ __forceinline__ u32 byte_perm(u32 lo, u32 hi, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(lo), "r"(hi), "r"(sel));
  return r;
}

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ float lowest_finite() { return -__int_as_float(0x7f7fffff); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Whether a value passes a row's reference maximum by more than
// HELIXMLA_TC_RESCALE_SLACK, so that the reference must move. A row that has
// seen nothing (-inf) moves to the first finite value.
__device__ __forceinline__ bool passes_reference(float m_ref, float x) {
  return x > m_ref + HELIXMLA_TC_RESCALE_SLACK;
}
// A row's reference maximum after a tile whose maximum is `tile_max`.
__device__ __forceinline__ float next_reference_max(float m_ref, float tile_max) {
  return passes_reference(m_ref, tile_max) ? tile_max : m_ref;
}
// O's rescale factor when the reference maximum moves from `from` to `to`:
// exactly 1 when it stays (which the skips test), 0 from nothing seen.
__device__ __forceinline__ float rescale_factor(float from, float to) {
  return from == to ? 1.0f : fast_exp2(from - to);
}

// wgmma shared-memory descriptor of the operand at shared address `addr`,
// with the 128-byte swizzle (SWIZZLE 1) or the 64-byte one (2); `addr` must
// sit in an aligned swizzle pattern (1024 or 512 bytes; plus an in-row byte
// offset for K steps).
template <u32 SWIZZLE = 1>
__device__ __forceinline__ constexpr u64 smem_desc_at(u32 addr, u32 leading_bytes, u32 stride_bytes) {
  return static_cast<u64>((addr & 0x3FFFFu) >> 4) | static_cast<u64>((leading_bytes & 0x3FFFFu) >> 4) << 16 |
         static_cast<u64>((stride_bytes & 0x3FFFFu) >> 4) << 32 | static_cast<u64>(SWIZZLE) << 62;
}
__device__ __forceinline__ u64 smem_desc(const void* p, u32 leading_bytes, u32 stride_bytes) {
  return smem_desc_at(smem_addr(p), leading_bytes, stride_bytes);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Until at most N of this warpgroup's committed groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (cp.async, st.shared) and
// read next by wgmma (the async proxy) must be fenced by its writers.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Named barriers: `threads` threads (whole warps) take part; sync waits for
// them all, arrive only counts this warp in. bar.sync is barrier.sync
// .aligned, for threads that all reach the same instruction (the matrix
// warpgroups' own barrier); the producer and the matrix warpgroups meet
// at different instructions, which takes the unaligned forms.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void handover_sync(int id, int threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void handover_arrive(int id, int threads) {
  asm volatile("barrier.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// setmaxnreg: a whole warpgroup moves its registers per thread to N (ptxas
// allocates the code after it within N; needs the launch bounds' count).
template <int N>
__device__ __forceinline__ void raise_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void lower_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Keeps the compiler from touching accumulators while a wgmma is in flight.
template <int N>
__device__ __forceinline__ void pin_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for A fragments, which a wgmma reads from registers while in flight.
template <int K, int N>
__device__ __forceinline__ void pin_registers(unsigned (&r)[K][N]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[k][i])::"memory");
}

// Shared by the two m64n32k16 forms below: the instruction text up to the
// A operand, the 16 accumulators as operands read and written (ACC) or
// written only (OUT), and the choice of the form's INSTR(TYPES, D, SCALE_D)
// for ELEM and ACCUMULATE.
#define HMLA_TC_M64N32_HEAD(TYPES, SCALE_D)                              \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"                  \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPES " "               \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
#define HMLA_TC_D16_OPERANDS(D)                                                                    \
  D(d[0]), D(d[1]), D(d[2]), D(d[3]), D(d[4]), D(d[5]), D(d[6]), D(d[7]), D(d[8]), D(d[9]), D(d[10]), \
      D(d[11]), D(d[12]), D(d[13]), D(d[14]), D(d[15])
#define HMLA_TC_ACC(x) "+f"(x)
#define HMLA_TC_OUT(x) "=f"(x)
#define HMLA_TC_BY_ELEM_AND_ACCUMULATE(INSTR)     \
  if constexpr (ELEM == kElemBf16 && ACCUMULATE) { \
    INSTR("bf16.bf16", HMLA_TC_ACC, "1");          \
  } else if constexpr (ELEM == kElemBf16) {        \
    INSTR("bf16.bf16", HMLA_TC_OUT, "0");          \
  } else if constexpr (ACCUMULATE) {               \
    INSTR("f16.f16", HMLA_TC_ACC, "1");            \
  } else {                                         \
    INSTR("f16.f16", HMLA_TC_OUT, "0");            \
  }

// S partial: D[64 x 32] (+)= A[64 x 16] B[32 x 16]^T, both K-major in shared
// memory. The first step of a sum (ACCUMULATE false) overwrites D and takes
// it as an output only, so D needs no zeroing by ordinary instructions and
// no copy of its old value (either, with another wgmma in flight, makes
// ptxas serialise the wgmma pipeline).
template <int ELEM, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], u64 desc_a, u64 desc_b) {
#define HMLA_TC_WGMMA_M64N32K16_SS(TYPES, D, SCALE_D)                                    \
  asm volatile(HMLA_TC_M64N32_HEAD(TYPES, SCALE_D) "%16, %17, p, 1, 1, 0, 0;\n}\n" \
               : HMLA_TC_D16_OPERANDS(D)                                           \
               : "l"(desc_a), "l"(desc_b))
  HMLA_TC_BY_ELEM_AND_ACCUMULATE(HMLA_TC_WGMMA_M64N32K16_SS)
#undef HMLA_TC_WGMMA_M64N32K16_SS
}

// The same with A (a 64 x 16 slice of Q) from registers, for the k16 steps
// whose Q fragments a warpgroup keeps: they read only B from shared memory.
template <int ELEM, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[16], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_WGMMA_M64N32K16_RS(TYPES, D, SCALE_D)                                                \
  asm volatile(HMLA_TC_M64N32_HEAD(TYPES, SCALE_D) "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n" \
               : HMLA_TC_D16_OPERANDS(D)                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  HMLA_TC_BY_ELEM_AND_ACCUMULATE(HMLA_TC_WGMMA_M64N32K16_RS)
#undef HMLA_TC_WGMMA_M64N32K16_RS
}
#undef HMLA_TC_BY_ELEM_AND_ACCUMULATE
#undef HMLA_TC_OUT
#undef HMLA_TC_ACC
#undef HMLA_TC_D16_OPERANDS
#undef HMLA_TC_M64N32_HEAD

// The 128 accumulator registers of an m64n256 wgmma: operand list and
// their place holders %0..%127 in the instruction text.
#define HMLA_TC_D128_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define HMLA_TC_D128_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// O half: D[64 x 256] += A[64 x 16] (registers) B[16 x 256], B N-major in shared memory.
template <int ELEM>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_WGMMA_M64N256K16_RS(TYPES)                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " " HMLA_TC_D128_TEXT ", "    \
               "{%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"                                  \
               : HMLA_TC_D128_OPERANDS(d)                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (ELEM == kElemBf16) {
    HMLA_TC_WGMMA_M64N256K16_RS("bf16.bf16");
  } else {
    HMLA_TC_WGMMA_M64N256K16_RS("f16.f16");
  }
#undef HMLA_TC_WGMMA_M64N256K16_RS
}

// The seesaw engine's matrix steps. P V with P from shared memory (the
// other warpgroup's tile): D[64 x 256] += A[64 x 16] B[16 x 256], A K-major,
// B N-major.
template <int ELEM>
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], u64 desc_a, u64 desc_b) {
#define HMLA_TC_WGMMA_M64N256K16_SS(TYPES)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " " HMLA_TC_D128_TEXT ", "      \
               "%128, %129, p, 1, 1, 0, 1;\n}\n"                                                   \
               : HMLA_TC_D128_OPERANDS(d)                                                         \
               : "l"(desc_a), "l"(desc_b))
  if constexpr (ELEM == kElemBf16) {
    HMLA_TC_WGMMA_M64N256K16_SS("bf16.bf16");
  } else {
    HMLA_TC_WGMMA_M64N256K16_SS("f16.f16");
  }
#undef HMLA_TC_WGMMA_M64N256K16_SS
}

// S of a whole 64-token tile: D[64 x 64] (+)= A[64 x 16] B[64 x 16]^T, both
// K-major in shared memory; `accumulate` 0 overwrites D.
#define HMLA_TC_D32_TEXT                                                                                      \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28," \
  "%29,%30,%31}"
#define HMLA_TC_D8_OPERANDS(d, i)                                                                            \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
template <int ELEM>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], u64 desc_a, u64 desc_b, int accumulate) {
#define HMLA_TC_WGMMA_M64N64K16_SS(TYPES)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES " " HMLA_TC_D32_TEXT ", %32, %33, p, 1, 1, 0, 0;\n}\n" \
               : HMLA_TC_D8_OPERANDS(d, 0), HMLA_TC_D8_OPERANDS(d, 8), HMLA_TC_D8_OPERANDS(d, 16),          \
                 HMLA_TC_D8_OPERANDS(d, 24)                                                                \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
  if constexpr (ELEM == kElemBf16) {
    HMLA_TC_WGMMA_M64N64K16_SS("bf16.bf16");
  } else {
    HMLA_TC_WGMMA_M64N64K16_SS("f16.f16");
  }
#undef HMLA_TC_WGMMA_M64N64K16_SS
}
#undef HMLA_TC_D8_OPERANDS
#undef HMLA_TC_D32_TEXT

// mbarriers of the seesaw engine: each completes when `count` threads'
// cp.async copies issued before their cp_async_arrive have landed.
__device__ __forceinline__ void mbarrier_init(u32 bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// The TMA build's barriers expect one arrival a phase: the issuing thread's,
// with the bytes its tensor copies will deliver, or, for a tile the
// per-thread copies fill, one after every thread's counted cp.async arrival
// (cp_async_arrive_counted raises the pending count as it is issued).
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_arrive_counted(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// One box of a 2D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const KvTensorMap* map, int x, int y, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Keeps a value the compiler would otherwise hoist out of a loop (and
// hold in a register per use) computed where it is used.
__device__ __forceinline__ u64 launder(u64 x) {
  asm volatile("" : "+l"(x));
  return x;
}
__device__ __forceinline__ u32 launder(u32 x) {
  asm volatile("" : "+r"(x));
  return x;
}

// A warpgroup's 256 output columns in the m64n256 accumulator layout
// (rows 16 warp + g: elements 4 j, 4 j + 1; + 8: 4 j + 2, 4 j + 3) times
// their rows' factors; skipped where every factor of the warp is 1, as on
// most tiles once the maxima settle.
__device__ __forceinline__ void rescale_o_half(float (&o)[128], float f_lo, float f_hi) {
  if (__any_sync(0xffffffffu, f_lo != 1.0f || f_hi != 1.0f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= f_lo;
      o[4 * j + 1] *= f_lo;
      o[4 * j + 2] *= f_hi;
      o[4 * j + 3] *= f_hi;
    }
  }
}

__device__ __forceinline__ int visible_kv(int kv_len, int q_len, int t) {
  const int n = kv_len - q_len + 1 + t;
  return n < 0 ? 0 : (n > kv_len ? kv_len : n);
}

// The KV bound of tile row `r` (relative to the item): its Helix bound or its
// causal one within the verify group, clamped to the item's range. Rows past
// the request's last get `padding`: they are never stored.
__device__ __forceinline__ int row_kv_bound(const Params& p, const WorkItem& w, int r, int rows_total, int padding) {
  if (w.row_begin + r >= rows_total) return padding;
  const int t = (w.row_begin + r) / p.heads;
  const int bound = p.token_bounds ? p.token_bounds[w.token_offset + t] : visible_kv(w.kv_len, w.q_len, t);
  return bound < w.kv_end ? bound : w.kv_end;
}

// split_combine's entry of tile row `r` in a split item.
__device__ __forceinline__ long long split_entry(const WorkItem& w, int r) {
  return static_cast<long long>(w.first_entry) + static_cast<long long>(r) * w.splits + w.split;
}

// Row `r`'s statistics (m in natural-log units, l): into stats for a whole
// item, into the split's partial entry otherwise.
__device__ __forceinline__ void store_row_stats(const Params& p, const WorkItem& w, long long row0, int r, float m,
                                                float l) {
  if (w.split < 0) {
    if (p.stats) *reinterpret_cast<float2*>(p.stats + (row0 + r) * 2) = make_float2(m, l);
  } else {
    *reinterpret_cast<float2*>(p.partial_stats + split_entry(w, r) * 2) = make_float2(m, l);
  }
}

template <int M, int PAGE, int ELEM, int KV, int ENGINE, int BLOCKS = 0>
__device__ __forceinline__ void decode_tile(const Params& p) {
  typedef Config<M, KV, ENGINE, BLOCKS> C;
  constexpr int MMA = KV == kKvFp8 ? kElemFp16 : ELEM;  // the matrix steps' input type
  constexpr int T = kTileTokens;
  constexpr int MT = C::kMTiles;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (C::kWgmma) smem += (1024 - (smem_addr(smem_raw) & 1023)) & 1023;
  unsigned char* q_s = smem + C::kQOffset;
  unsigned char* stage_s = smem + C::kStageOffset;
  unsigned char* wide_s = smem + C::kWideOffset;
  float* alpha_s = reinterpret_cast<float*>(smem + C::kRowInfoOffset);
  int* bound_s = reinterpret_cast<int*>(alpha_s + M);
  float* m_s = alpha_s + 2 * M;
  float* l_s = alpha_s + 3 * M;
  float* top_s = alpha_s + 4 * M;  // true row maxima, for the stats
  // mma.sync: the last tile in which some row's reference maximum moved.
  int* rescale_tile_s = reinterpret_cast<int*>(alpha_s + 5 * M);

  // The barrier of the threads that run the matrix steps: the whole block,
  // less the producer warpgroup where there is one.
  auto matrix_sync = [] {
    if constexpr (C::kProducer) {
      named_barrier_sync(kMatrixBarrier, kThreads);
    } else {
      __syncthreads();
    }
  };

  const WorkItem w = p.items[blockIdx.x];
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int c4 = lane & 3;
  const int rows_total = w.q_len * p.heads;
  const long long row0 = static_cast<long long>(w.token_offset) * p.heads + w.row_begin;

  // The wgmma loop is split into its steps so that they overlap across
  // tiles: S(it + 1) is issued before the softmax of tile it and P V(it)
  // right behind it, so the tensor cores work through the softmax and one
  // round trip of wgmma issue and wait per tile disappears; with fp8 KV the
  // producer warpgroup widens up to three tiles ahead. Until session 12,
  // 16-bit KV in pages under 8 tokens kept a serial order (issue, wait,
  // softmax, issue, wait): the overlap, which waits for tile it + 1 and so
  // keeps one tile less in flight, measured 6-19% slower there. What it
  // lost to was the page table: a fresh line per tile whose load stalled
  // the loop at once (see lookup below); with that fixed the overlap is
  // faster at every page size (case 16 401.7 -> 341.5 us).
  //
  // The softmax of the 16-bit loop takes maxima of the unscaled S (the
  // scale is positive), folds the scale into each exponent's FFMA and masks
  // only tiles that reach a row's bound: 1-2% faster on suite cases 3, 4, 6
  // and 13, but 0.6% slower on fp8 (case 10), which keeps the plain one
  // (session 10).
  constexpr bool kLeanSoftmax = C::kWgmma && KV != kKvFp8;

  const int* page_row = p.page_table + static_cast<long long>(w.request) * p.page_table_stride;
  const unsigned char* pool = static_cast<const unsigned char*>(p.pool);

  if constexpr (!C::kWgmma) {  // only mma.sync's warps share a rescale decision
    if (tid == 0) *rescale_tile_s = -1;
  }
  if (tid < M) {
    // The lean softmax lets rows past the request's last see the whole
    // range, so that the warps holding them take the unmasked path in full
    // tiles too (their Q is zero-filled: finite S).
    bound_s[tid] = row_kv_bound(p, w, tid, rows_total, kLeanSoftmax ? w.kv_end : 0);
  }

  // Copies are spread eight threads to a row, each taking every eighth chunk,
  // so a thread's addresses advance by constants and need few registers.
  const int sub = tid & 7;
  if (!C::kProducer || tid < kThreads) {  // the producer copies KV only
    const unsigned char* q = static_cast<const unsigned char*>(p.q);
#pragma unroll
    for (int r = tid >> 3; r < M; r += kThreads / 8) {
      const bool valid = w.row_begin + r < rows_total;
      const unsigned char* src = valid ? q + (row0 + r) * kRowBytes16 + sub * 16 : q;
#pragma unroll
      for (int k = 0; k < kChunksPerRow / 8; ++k) {
        unsigned char* dst = k < C::kQRegBlocks ? smem + C::kQStageOffset + swizzled(M, r, sub + 8 * k)
                                                : q_s + swizzled(M, r, sub + 8 * (k - C::kQRegBlocks));
        cp_async_16(dst, valid ? src + 128 * k : src, valid);
      }
    }
  }

  const int n_tiles = w.kv_end > w.kv_begin ? (w.kv_end - w.kv_begin + T - 1) / T : 0;

  // This thread's page-table entry for KV tile `tile` (32 positions from
  // kv_begin + 32 * tile), looked up one tile before its copy is issued so
  // that the load never stalls the copy, and its pool slot (-1 past the
  // range). Pages under a tile keep the loaded page id until the copy:
  // widening it to the slot right behind the load put the page table's
  // latency (a fresh line every tile at page 1) on the loop, a quarter of
  // the wgmma loop's stall samples at page 1 (ncu, session 12).
  // Pages of a tile or more give a tile one or two entries, which hit, and
  // widen at once: 2-4% faster at pages 64 and 128 than deferring.
  constexpr bool kWidenAtCopy = PAGE < T;
  // KV copies: eight threads to a row as for Q, except where fp8 wgmma
  // widens them. 16-byte shared-memory accesses are served a quarter-warp
  // at a time, and the widened chunks 2c of one row fall on only four of
  // the eight 16-byte bank groups: with a row to each quarter-warp every
  // widening store took two wavefronts (ncu, session 13). There each
  // quarter-warp takes four chunks of two adjacent rows (whose swizzles
  // differ in bit 0), lanes (row, sub) = bits (4 2, 3 1 0).
  constexpr bool kPairedRows = KV == kKvFp8 && C::kWgmma;
  const int load_tok = kPairedRows ? 4 * warp + 2 * (lane >> 4) + ((lane >> 2) & 1) : tid >> 3;
  const int load_sub = kPairedRows ? (lane & 3) + 4 * ((lane >> 3) & 1) : sub;
  auto lookup = [&](int tile) {
    const int pos = w.kv_begin + tile * T + load_tok;
    if constexpr (kWidenAtCopy) {
      return pos < w.kv_end ? page_row[pos / PAGE] : -1;
    } else {
      return pos < w.kv_end ? static_cast<long long>(page_row[pos / PAGE]) * PAGE + pos % PAGE : -1LL;
    }
  };
  typedef decltype(lookup(0)) Entry;
  auto slot_of = [&](int tile, Entry entry) -> long long {
    if constexpr (kWidenAtCopy) {
      return entry < 0 ? -1 : static_cast<long long>(entry) * PAGE + (w.kv_begin + tile * T + load_tok) % PAGE;
    } else {
      return entry;
    }
  };
  // Gathers this thread's share of a KV tile (its row at `slot`) into `stage`.
  auto load_tile = [&](long long slot, int stage) {
    const bool valid = slot >= 0;
    if (!valid) slot = 0;
    unsigned char* dst = stage_s + stage * C::kStageBytes;
    if constexpr (KV == kKvFp8) {
      const unsigned char* src = pool + slot * kHeadDim + load_sub * 16;
#pragma unroll
      for (int k = 0; k < (kHeadDim / 16 + 7) / 8; ++k) {
        if (load_sub + 8 * k < kHeadDim / 16) {
          cp_async_16(dst + fp8_chunk_offset<C::kWgmma>(load_tok, load_sub + 8 * k), src + 128 * k, valid);
        }
      }
    } else {
      const unsigned char* src = pool + slot * kRowBytes16 + load_sub * 16;
#pragma unroll
      for (int k = 0; k < kChunksPerRow / 8; ++k) {
        cp_async_16(dst + swizzled(T, load_tok, load_sub + 8 * k), src + 128 * k, valid);
      }
    }
  };

  // The 16-bit tile the wgmma loop's matrix steps read for tile `tile`.
  auto mma_tile = [&](int tile) -> unsigned char* {
    constexpr int kRing = C::kWideTiles > 0 ? C::kWideTiles : 1;  // no % 0 where there are none
    if constexpr (C::kWideTiles > 0) return wide_s + (tile % kRing) * C::kTileBytes16;
    return stage_s + (tile % C::kStages) * C::kStageBytes;
  };

  if constexpr (C::kProducer) {
    if (tid >= kThreads) {
      // The producer copies and widens every tile of the item, rows `row`
      // and `row` + 16 of each (two copy threads of the 256-thread mapping,
      // the same lanes, so the widening's stores keep their bank pattern),
      // widening only what its own copies brought. The two rows make two
      // independent chains per chunk, all the latency hiding 40 registers
      // leave. Page ids stay ints until their copy a tile later (the
      // multiply right behind the load waited for it every tile).
      lower_registers<kProducerRegisters>();
      static_assert(C::kStages == C::kWideTiles, "one ring position for a tile's raw stage and widened tile");
      constexpr int R = C::kStages;
      const int row = load_tok - 32;
      auto page_of = [&](int tile, int r) {
        const int pos = w.kv_begin + tile * T + r;
        return pos < w.kv_end ? page_row[pos / PAGE] : -1;
      };
      // Offsets are spelled linear in the chunk step k (ptxas kept one
      // register per chunk otherwise, and spilled them): raw chunk
      // load_sub + 8 k of row r at r * 576 + 16 load_sub + 128 k; widened
      // chunks 2 c and 2 c + 1 at `wide_lo` and `wide_hi` + k * 2 * T * 128,
      // row + 16 a constant further in both (its swizzle is row's).
      const int raw_at = fp8_chunk_offset<true>(row, load_sub);
      const int wide_lo = swizzled(T, row, 2 * load_sub);
      const int wide_hi = swizzled(T, row, 2 * load_sub + 1);
      constexpr int kChunkSteps = (kHeadDim / 16 + 7) / 8;
      const bool last_step = load_sub + 8 * (kChunkSteps - 1) < kHeadDim / 16;  // the fifth chunk exists
      auto copy_row = [&](int tile, int h, int page, unsigned char* stage) {
        const bool valid = page >= 0;
        const int pos = w.kv_begin + tile * T + row + 16 * h;
        const long long slot = valid ? static_cast<long long>(page) * PAGE + pos % PAGE : 0;
        const unsigned char* src = pool + slot * kHeadDim + load_sub * 16;
        unsigned char* dst = stage + raw_at + h * 16 * kHeadDim;
#pragma unroll
        for (int k = 0; k < kChunkSteps; ++k) {
          if (k + 1 < kChunkSteps || last_step) cp_async_16(dst + 128 * k, src + 128 * k, valid);
        }
      };
      auto copy_tile = [&](int tile, const int (&pages)[2], unsigned char* stage) {
        copy_row(tile, 0, pages[0], stage);
        copy_row(tile, 1, pages[1], stage);
      };
      auto widen_rows = [&](const unsigned char* raw, unsigned char* wide) {
#pragma unroll
        for (int k = 0; k < kChunkSteps; ++k) {
          if (k + 1 < kChunkSteps || last_step) {
            uint4 bytes[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              bytes[h] = *reinterpret_cast<const uint4*>(raw + raw_at + h * 16 * kHeadDim + 128 * k);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const u32 words[4] = {bytes[h].x, bytes[h].y, bytes[h].z, bytes[h].w};
              u32 pairs[8];
#pragma unroll
              for (int i = 0; i < 4; ++i) widen_fp8x4(words[i], pairs[2 * i], pairs[2 * i + 1]);
              unsigned char* at = wide + h * 16 * 128 + k * 2 * (T * 128);
              *reinterpret_cast<uint4*>(at + wide_lo) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
              *reinterpret_cast<uint4*>(at + wide_hi) = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
            }
          }
        }
      };
#pragma unroll
      for (int t = 0; t < R - 1; ++t) {
        if (t < n_tiles) {
          const int pages[2] = {page_of(t, row), page_of(t, row + 16)};
          copy_tile(t, pages, stage_s + t * C::kStageBytes);
        }
        cp_async_commit();
      }
      int pages[2] = {page_of(R - 1, row), page_of(R - 1, row + 16)};
      // Q's register columns are staged where the widened tiles go: the
      // producer takes part in the matrix threads' "Q has landed" barrier
      // (below), then waits until they have read them.
      handover_sync(kQStagingBarrier, C::kBlockThreads);
      handover_sync(kQStagingBarrier, C::kBlockThreads);
      int ring = 0;  // tile t % R
      for (int t = 0; t < n_tiles; ++t) {
        // Tile t + R - 1 into the stage of tile t - 1, which this thread has widened.
        const int next = t + R - 1;
        const int next_ring = ring == 0 ? R - 1 : ring - 1;
        if (next < n_tiles) copy_tile(next, pages, stage_s + next_ring * C::kStageBytes);
        cp_async_commit();
        pages[0] = page_of(next + 1, row);
        pages[1] = page_of(next + 1, row + 16);
        cp_async_wait<R - 1>();  // this thread's copies of tile t
        // Tile t - R's widened tile is free once every matrix thread's
        // P V(t - R) has completed.
        if (t >= R) handover_sync(kEmptyBarrier0 + ring, C::kBlockThreads);
        widen_rows(stage_s + ring * C::kStageBytes, wide_s + ring * C::kTileBytes16);
        fence_proxy_async();
        handover_arrive(kFullBarrier0 + ring, C::kBlockThreads);
        ring = ring == R - 1 ? 0 : ring + 1;
      }
      return;
    }
    raise_registers<kMatrixRegisters>();
  }

  // Tiles are copied a whole step at a time: past the last tile, the rest
  // of the last step is zero-filled (slot -1), so it multiplies finite zeros.
  constexpr int kSub = C::kTilesPerStep;
  // (One-tile steps spell out n_tiles: the rounding, though it folds to
  // the same value, changed the 16-bit mma.sync kernels' machine code.)
  const int n_copied = kSub == 1 ? n_tiles : (n_tiles + kSub - 1) / kSub * kSub;
  constexpr int kAhead = C::kStages - kSub;  // tiles in the ring beyond the current step
  Entry next_entry[kSub];  // the next step's tiles, looked up a step ahead
  if constexpr (C::kProducer) {
    cp_async_commit();  // Q alone
  } else {
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
      if (s < n_copied) load_tile(slot_of(s, lookup(s)), s);
      cp_async_commit();  // Q travels in the first group
    }
#pragma unroll
    for (int s = 0; s < kSub; ++s) next_entry[s] = lookup(kAhead + s);
  }
  // The matrix threads' commit groups in front of Q's that may be in flight.
  constexpr int kAfterQ = C::kProducer ? 0 : kAhead - 1;

  // Softmax ownership: row srow, tokens [stok, stok + kRowTokens) of each tile.
  const int srow = tid / C::kRowThreads;
  const int stok = (tid % C::kRowThreads) * C::kRowTokens;
  float m_run = neg_inf();  // reference maximum (next_reference_max)
  float m_top = neg_inf();  // true maximum
  float l_run = 0.0f;       // this thread's tokens only, until the epilogue

  // mma.sync S ownership: rows [16 mt, +16), tokens [16 wn, +16), every
  // kWarpsK-th k16 step. wgmma: warpgroup wg takes k16 steps 2 i + wg.
  const int s_mt = warp % MT;
  const int s_wn = (warp / MT) & 1;
  const int s_wk = warp / (2 * MT);
  // Broadcast from lane 0 so the compiler sees a warp-uniform value and can
  // keep the wgmma descriptors below in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
  const int wg_warp = warp & 3;
  // wgmma softmax state, rows wg_row and wg_row + 8 (l: this thread's tokens only).
  const int wg_row = wg_warp * 16 + g;
  float m_lo = neg_inf(), m_hi = neg_inf();
  float top_lo = neg_inf(), top_hi = neg_inf();
  float l_lo = 0.0f, l_hi = 0.0f;
  const u64 q_desc = smem_desc(q_s + wg * 32, 16, 1024);
  // Q fragments of this warpgroup's first kQRegSteps k16 steps (k16 step
  // 2 i + wg) in the wgmma A layout, from their staging copy (Config::
  // kQStageOffset): warp wg_warp holds rows 16 wg_warp + g (+8), columns
  // 2 c4 (+1) and +8.
  u32 q_frag[C::kQRegSteps > 0 ? C::kQRegSteps : 1][4];
  if constexpr (C::kQRegSteps > 0) {
    cp_async_wait<kAfterQ>();  // Q travels in the first group
    // The producer build waits for Q with the whole block, producer
    // included: compute-sanitizer's racecheck (2025.3) reports the reads
    // after a barrier of part of the block as racing with writes after a
    // later block-wide one (scripts/probes/racecheck_handover.cu), which
    // here would be the producer's first widening into Q's staging. Once a
    // block, so it costs nothing; the producer has issued its first copies.
    if constexpr (C::kProducer) {
      handover_sync(kQStagingBarrier, C::kBlockThreads);
    } else {
      matrix_sync();
    }
    const int a_row = wg_warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int i = 0; i < C::kQRegSteps; ++i) {
      ldmatrix_x4(q_frag[i], smem + C::kQStageOffset + swizzled(M, a_row, 2 * (2 * i + wg) + (lane >> 4)));
    }
  }
  // Q's staging is free for the producer's widened tiles (a sync, where an
  // arrive would do: once a block, the wait costs nothing).
  if constexpr (C::kProducer) handover_sync(kQStagingBarrier, C::kBlockThreads);

  // fp8 KV runs the matrix steps in fp16, whatever Q's type: one
  // cvt.rn.f16x2.e4m3x2 widens two values exactly, where bf16 takes four
  // instructions. bf16 Q becomes fp16 scaled by 2^-k, k chosen per block
  // so that the largest |Q| lands in [2^14, 2^15) (fp16 has the finer
  // mantissa but not bf16's range); 2^k goes into the softmax scale.
  // mma.sync also reorders each k16 step's 16 Q columns so that one
  // four-byte load of K gives both B fragment registers (see the S loop).
  // (fp16 Q on wgmma needs neither.)
  float scale_log2 = p.scale_log2;
  if constexpr (KV == kKvFp8 && (ELEM == kElemBf16 || !C::kWgmma)) {
    if constexpr (C::kQRegSteps == 0) {  // else Q's register columns waited for it above
      cp_async_wait<kAfterQ>();  // Q travels in the first group
      matrix_sync();
    }
    float q_scale = 1.0f;
    if constexpr (ELEM == kElemBf16) {
      u32 top = 0;  // largest |Q| bit pattern (sign dropped) of this thread's values
      auto take = [&](u32 pair) {
        const u32 lo = pair & 0x7fffu;
        const u32 hi = (pair >> 16) & 0x7fffu;
        top = top > lo ? top : lo;
        top = top > hi ? top : hi;
      };
      const u32* q_words = reinterpret_cast<const u32*>(q_s);
      for (int i = tid; i < C::kQBytes / 4; i += kThreads) take(q_words[i]);
#pragma unroll
      for (int i = 0; i < C::kQRegSteps; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) take(q_frag[i][j]);
      asm("redux.sync.max.u32 %0, %0, 0xffffffff;\n" : "+r"(top));
      u32* top_s = reinterpret_cast<u32*>(smem + C::kSOffset);  // free until the loop
      if (lane == 0) top_s[warp] = top;
      matrix_sync();
#pragma unroll
      for (int i = 0; i < kThreads / 32; ++i) top = top > top_s[i] ? top : top_s[i];
      // Exponent field f: 2^(f - 127) <= max |Q| < 2^(f - 126), so k = f - 141
      // puts it in [2^14, 2^15): below fp16's limit, and smaller values keep
      // full precision down to 2^-29 of it. Inf and NaN (f = 255) pass
      // through unscaled; k stays where 2^k and 2^-k are normal floats.
      const int field = static_cast<int>(top >> 7);
      const int k = field == 255 ? 0 : (field - 141 < -126 ? -126 : field - 141);
      q_scale = __int_as_float((127 - k) << 23);
      scale_log2 *= __int_as_float((127 + k) << 23);
    }
    auto to_mma_type = [&](u32 pair) -> u32 {
      if constexpr (ELEM == kElemBf16) {
        return pack2<kElemFp16>(__uint_as_float(pair << 16) * q_scale,
                                __uint_as_float(pair & 0xffff0000u) * q_scale);
      } else {
        return pair;
      }
    };
    if constexpr (C::kWgmma) {
      constexpr int kSmemSteps = kHeadDim / 16 - 4 * C::kQRegBlocks;  // k16 steps of Q in shared memory
      for (int i = tid; i < M * kSmemSteps; i += kThreads) {
        const int r = i % M;
        const int step = i / M;
        uint4* c0 = reinterpret_cast<uint4*>(q_s + swizzled(M, r, 2 * step));
        uint4* c1 = reinterpret_cast<uint4*>(q_s + swizzled(M, r, 2 * step + 1));
        const uint4 a = *c0;
        const uint4 b = *c1;
        *c0 = make_uint4(to_mma_type(a.x), to_mma_type(a.y), to_mma_type(a.z), to_mma_type(a.w));
        *c1 = make_uint4(to_mma_type(b.x), to_mma_type(b.y), to_mma_type(b.z), to_mma_type(b.w));
      }
    } else {
      // Q's column pairs reordered within each 64-column block so that
      // fragment columns 2 c4 (+1) and 2 c4 + 8 (+1) of a k16 step hold four
      // adjacent columns: k16 step j's chunk h, pair i takes pair
      // 16 (j / 2) + 4 i + 2 (j % 2) + h of the block in the latent blocks
      // (thread c4's two steps of a 32-column half then read one 8-byte piece
      // of K: columns 8 c4 .. + 7 of the half) and pair 8 j + 2 i + h in the
      // rope block (one four-byte piece per step: 16 j + 4 c4 .. + 3).
      for (int i = tid; i < M * (kHeadDim / 64); i += kThreads) {
        const int r = i % M;
        const int block = i / M;
        u32 pairs[32];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const uint4 v = *reinterpret_cast<const uint4*>(q_s + swizzled(M, r, 8 * block + c));
          pairs[4 * c] = v.x;
          pairs[4 * c + 1] = v.y;
          pairs[4 * c + 2] = v.z;
          pairs[4 * c + 3] = v.w;
        }
        auto store = [&](bool latent) {
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            u32 w[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const int j = c >> 1, h = c & 1;
              w[k] = to_mma_type(pairs[latent ? 16 * (j >> 1) + 4 * k + 2 * (j & 1) + h : 8 * j + 2 * k + h]);
            }
            *reinterpret_cast<uint4*>(q_s + swizzled(M, r, 8 * block + c)) = make_uint4(w[0], w[1], w[2], w[3]);
          }
        };
        // Two calls with constant arguments, so that each unrolls with
        // constant indices and `pairs` stays in registers.
        if (block < kLatent / 64) {
          store(true);
        } else {
          store(false);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < C::kQRegSteps; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) q_frag[i][j] = to_mma_type(q_frag[i][j]);
    matrix_sync();
  }

  // O accumulators. mma.sync: [mt][nt][4] for rows 16 mt + g (+8), columns
  // 64 warp + 8 nt + 2 c4 (+1). wgmma: [j][4] for rows 16 wg_warp + g (+8),
  // columns 256 wg + 8 j + 2 c4 (+1). Both are 128 floats for 64 rows.
  float acc[MT * 32];
#pragma unroll
  for (int i = 0; i < MT * 32; ++i) acc[i] = 0.0f;

  float s_acc[16];    // this warpgroup's S partial sum, then the whole S tile
  float s_next[16];   // overlap: S of the next tile, in flight during this tile's softmax
  u32 pa[T / 16][4];  // P as wgmma A fragments, read by P V while it is in flight
  // S partial sum over this warpgroup's half of the reduction into `d`, issued, not awaited.
  auto issue_s = [&](const unsigned char* kv, float(&d)[16]) {
    if constexpr (C::kWgmma) {  // wgmma exists on sm_90a only
      const u64 k_desc = smem_desc(kv + wg * 32, 16, 1024);
      wgmma_fence();
#pragma unroll
      for (int i = 0; i < C::kKSteps; ++i) {
        // k16 step 2 i + wg: 128-byte block i / 2, 32-byte slot 2 (i % 2) + wg.
        // Descriptors are linear in the address, so each step adds a
        // constant to a base computed once (the per-step address arithmetic
        // otherwise outnumbers the MMAs and starves the tensor cores).
        // Q in shared memory starts at 64-column block kQRegBlocks.
        const u64 da = q_desc + static_cast<u64>((((i >> 1) - C::kQRegBlocks) * (M * 128) + (i & 1) * 64) >> 4);
        const u64 db = k_desc + static_cast<u64>(((i >> 1) * (T * 128) + (i & 1) * 64) >> 4);
        if (i < C::kQRegSteps) {
          if (i == 0) {
            wgmma_m64n32k16_rs<MMA, false>(d, q_frag[i], db);
          } else {
            wgmma_m64n32k16_rs<MMA, true>(d, q_frag[i], db);
          }
        } else if (i == 0) {
          wgmma_m64n32k16_ss<MMA, false>(d, da, db);
        } else {
          wgmma_m64n32k16_ss<MMA, true>(d, da, db);
        }
      }
      wgmma_commit();
    }
  };
  // The two partial sums meet in shared memory in fragment order (thread t
  // of one warpgroup holds the same elements as thread t of the other), so
  // both warpgroups end up with the whole S tile in registers. Contains a
  // block barrier; in the producer build named barrier `barrier` of
  // `threads` threads (the producer's "full" of the next tile, if any).
  auto add_other_s_half = [&](unsigned char* scratch, int barrier, int threads) {
    float4* exchange = reinterpret_cast<float4*>(scratch);
    const int wg_tid = tid & 127;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      exchange[(wg * 4 + q) * 128 + wg_tid] =
          make_float4(s_acc[4 * q], s_acc[4 * q + 1], s_acc[4 * q + 2], s_acc[4 * q + 3]);
    }
    if constexpr (C::kProducer) {
      handover_sync(barrier, threads);
    } else {
      __syncthreads();
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 other = exchange[((wg ^ 1) * 4 + q) * 128 + wg_tid];
      s_acc[4 * q] += other.x;
      s_acc[4 * q + 1] += other.y;
      s_acc[4 * q + 2] += other.z;
      s_acc[4 * q + 3] += other.w;
    }
  };
  // Issues the copies of the step kStages - kSub tiles ahead of step `it`
  // (into the stages of step it - kSub, which no thread reads any more), a
  // commit group per tile, and looks up the step after.
  // (None in the producer build, whose producer issues them.)
  auto load_ahead = [&](int it) {
    if constexpr (!C::kProducer) {
      auto issue = [&](int s) {
        const int next = it + kAhead + s;
        if (next < n_copied) load_tile(slot_of(next, next_entry[s]), next % C::kStages);
        cp_async_commit();
        next_entry[s] = lookup(next + kSub);
      };
      issue(0);
      if constexpr (kSub == 2) issue(1);
    }
  };

  // Online softmax of tile `it` on the whole S tile in registers, then
  // P V issued into this warpgroup's 256 output columns, not awaited.
  auto softmax_and_issue_pv = [&](const unsigned char* kv, int it) {
    if constexpr (C::kWgmma) {
      // V N-major: 64-column blocks T * 128 bytes apart, 8-token groups 1024.
      const u64 v_desc = smem_desc(kv + (4 * wg) * (T * 128), T * 128, 1024);
      const int bound_lo = bound_s[wg_row];
      const int bound_hi = bound_s[wg_row + 8];
      // Online softmax of rows wg_row (elements 4 j + e) and wg_row + 8
      // (4 j + 2 + e), tokens 8 j + 2 c4 + e; the four threads of a quad share
      // the rows. Both warpgroups compute the same values; l stays a
      // per-thread partial sum until the epilogue.
      const int start = w.kv_begin + it * T;
      // Row maxima of the tile over visible positions: lean, of the
      // unscaled S (the scale is positive); plain, of the scaled S.
      float max_lo = neg_inf(), max_hi = neg_inf();
      if (kLeanSoftmax && start + T <= (bound_lo < bound_hi ? bound_lo : bound_hi)) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            max_lo = fmaxf(max_lo, s_acc[4 * j + e]);
            max_hi = fmaxf(max_hi, s_acc[4 * j + 2 + e]);
          }
        }
      } else {
        const float factor = kLeanSoftmax ? 1.0f : scale_log2;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int pos = start + 8 * j + 2 * c4 + e;
            s_acc[4 * j + e] = pos < bound_lo ? s_acc[4 * j + e] * factor : neg_inf();
            s_acc[4 * j + 2 + e] = pos < bound_hi ? s_acc[4 * j + 2 + e] * factor : neg_inf();
            max_lo = fmaxf(max_lo, s_acc[4 * j + e]);
            max_hi = fmaxf(max_hi, s_acc[4 * j + 2 + e]);
          }
        }
      }
      // The row maxima over the quad on every tile: a warp vote to skip the
      // shuffles (as the mma.sync softmax does) made the loop
      // 1-3% slower (session 12).
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        max_lo = fmaxf(max_lo, __shfl_xor_sync(0xffffffffu, max_lo, off));
        max_hi = fmaxf(max_hi, __shfl_xor_sync(0xffffffffu, max_hi, off));
      }
      const float tile_lo = kLeanSoftmax ? max_lo * scale_log2 : max_lo;
      const float tile_hi = kLeanSoftmax ? max_hi * scale_log2 : max_hi;
      top_lo = fmaxf(top_lo, tile_lo);
      top_hi = fmaxf(top_hi, tile_hi);
      const float new_lo = next_reference_max(m_lo, tile_lo);
      const float new_hi = next_reference_max(m_hi, tile_hi);
      const bool any_lo = new_lo != neg_inf();
      const bool any_hi = new_hi != neg_inf();
      const float alpha_lo = rescale_factor(m_lo, new_lo);
      const float alpha_hi = rescale_factor(m_hi, new_hi);
      float sum_lo = 0.0f, sum_hi = 0.0f;
      if constexpr (kLeanSoftmax) {
        // A row that has seen nothing subtracts 0: its -inf positions give 0.
        const float sub_lo = any_lo ? new_lo : 0.0f;
        const float sub_hi = any_hi ? new_hi : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            s_acc[4 * j + e] = fast_exp2(fmaf(s_acc[4 * j + e], scale_log2, -sub_lo));
            s_acc[4 * j + 2 + e] = fast_exp2(fmaf(s_acc[4 * j + 2 + e], scale_log2, -sub_hi));
            sum_lo += s_acc[4 * j + e];
            sum_hi += s_acc[4 * j + 2 + e];
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            s_acc[4 * j + e] = any_lo ? fast_exp2(s_acc[4 * j + e] - new_lo) : 0.0f;
            s_acc[4 * j + 2 + e] = any_hi ? fast_exp2(s_acc[4 * j + 2 + e] - new_hi) : 0.0f;
            sum_lo += s_acc[4 * j + e];
            sum_hi += s_acc[4 * j + 2 + e];
          }
        }
      }
      l_lo = l_lo * alpha_lo + sum_lo;
      l_hi = l_hi * alpha_hi + sum_hi;
      m_lo = new_lo;
      m_hi = new_hi;

      // O[:, 256 wg .. +256] = alpha * O + P V. The S accumulator layout is
      // the register A-operand layout of P: k16 step kk takes 8-token groups
      // 2 kk and 2 kk + 1. Once the running maxima settle, alpha is 1 and
      // the rescale is skipped.
      rescale_o_half(acc, alpha_lo, alpha_hi);
#pragma unroll
      for (int kk = 0; kk < T / 16; ++kk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[kk][i] = pack2<MMA>(s_acc[8 * kk + 2 * i], s_acc[8 * kk + 2 * i + 1]);
      }
      pin_registers(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < T / 16; ++kk) {
        const u64 dv = v_desc + static_cast<u64>((kk * 16 * 128) >> 4);
        wgmma_m64n256k16_rs<MMA>(acc, pa[kk], dv);
      }
      wgmma_commit();
    }
  };

  // mma.sync's Q fragments: chunk 2 * kstep + x of Q sits in block kstep /
  // 4 at in-block slot (2 * (kstep % 4) + x) ^ (row % 8): each thread keeps
  // the slot offsets of the in-block steps its warp takes, the block offset
  // is a constant.
  constexpr int kQ = 4 / C::kWarpsK;
  const int a_row = s_mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  auto a_slot = [&](int q4) { return a_row * 128 + (((2 * q4 + (lane >> 4)) ^ (a_row & 7)) << 4); };
  // fp8 (Q's columns reordered, see above): warp s_wk takes both k16 steps
  // of the latent's 32-column pairs [kPairs s_wk, + kPairs) and rope steps
  // kQ s_wk .. + kQ - 1. This warp's step i: pair i / 2's step i % 2, then
  // the rope steps. Offsets differ between steps and pairs only in bits 4-6,
  // so each is one base XOR a constant.
  constexpr int kPairs = kLatent / 32 / C::kWarpsK;
  auto fp8_q_at = [&](int i) -> const unsigned char* {
    if (i < 2 * kPairs) {
      const int pi = i >> 1;
      const int a_first = (s_wk * kPairs / 2) * (M * 128) + a_slot(0);
      return q_s + (pi >> 1) * (M * 128) + (a_first ^ ((2 * (pi & 1) + (i & 1)) << 5));
    }
    const int a_rope = (kLatent / 64) * (M * 128) + a_slot(s_wk * kQ);
    return q_s + (a_rope ^ ((i - 2 * kPairs) << 5));
  };
  constexpr bool kQInRegisters = C::kQInRegisters;
  u32 q_reg[kQInRegisters ? 2 * kPairs + kQ : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int i = 0; i < 2 * kPairs + kQ; ++i) ldmatrix_x4(q_reg[i], fp8_q_at(i));
  }

  for (int it = 0; it < n_tiles; it += kSub) {
    if constexpr (C::kWgmma) {
      // The tensor cores take S(it + 1) while this tile's softmax runs,
      // then P V(it): S is issued as soon as the swap's barrier has shown
      // that tile it + 1 is in place for every thread (16-bit: landed;
      // fp8: widened by the producer warpgroup).
      if (it == 0) {
        if constexpr (C::kProducer) {
          // Q's shared-memory columns (this thread's copies, and bf16 Q's
          // rescaled stores) are read by the async proxy from here on;
          // the producer fences its own widened tiles.
          fence_proxy_async();
          handover_sync(kFullBarrier0, C::kBlockThreads);  // tile 0 widened
        } else {
          cp_async_wait<C::kStages - 2>();
          fence_proxy_async();
          __syncthreads();
        }
        issue_s(mma_tile(0), s_next);
      }
      wgmma_wait<0>();  // S(it) and P V(it - 1)
      pin_registers(s_next);
      pin_registers(acc);
      pin_registers(pa);
#pragma unroll
      for (int i = 0; i < 16; ++i) s_acc[i] = s_next[i];
      if constexpr (KV != kKvFp8) {
        cp_async_wait<C::kStages - 3>();  // tile it + 1; later tiles may still be in flight
        fence_proxy_async();
      }
      if constexpr (C::kProducer) {
        // This thread's P V(it - 1) has completed: tile it - 1's widened
        // tile is free for the producer's tile it - 1 + W, if there is one.
        constexpr int W = C::kWideTiles;
        if (it >= 1 && it - 1 + W < n_tiles) handover_arrive(kEmptyBarrier0 + (it - 1) % W, C::kBlockThreads);
        // The swap's barrier also waits for tile it + 1's widening.
        const bool next = it + 1 < n_tiles;
        add_other_s_half(smem + C::kSOffset + (it & 1) * C::kSwapBytes,
                         next ? kFullBarrier0 + (it + 1) % W : kMatrixBarrier, next ? C::kBlockThreads : kThreads);
      } else {
        add_other_s_half(smem + C::kSOffset + (it & 1) * C::kSwapBytes, 0, kThreads);
      }
      if (it + 1 < n_tiles) issue_s(mma_tile(it + 1), s_next);
      load_ahead(it);  // past the barrier, every P V(it - 1) has completed
      softmax_and_issue_pv(mma_tile(it), it);
    } else {
      cp_async_wait<C::kStages - 2 * kSub>();  // the step's tiles
      __syncthreads();
      load_ahead(it);
      // The stage of tile it + sub of this step.
      auto kv_of = [&](int sub) -> const unsigned char* {
        return stage_s + ((it + sub) % C::kStages) * C::kStageBytes;
      };
      // S partial sums of this warp into s_buf[s_wk]
      float* s_buf = reinterpret_cast<float*>(smem + C::kSOffset);
      unsigned char* p_s = smem + C::kPOffset;
      // S of tile it + sub into columns 32 sub on of the partial sums.
      auto s_tile = [&](int sub) {
        const unsigned char* kv = kv_of(sub);
        float s_acc[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) s_acc[nt][i] = 0.0f;
        if constexpr (KV == kKvFp8) {
          // This thread's B fragments of a k16 step are K[token][k .. k + 3]
          // for tokens g and g + 8 of its half, four adjacent columns (Q's
          // columns were reordered to match), widened in registers. Warp s_wk
          // takes both steps of the latent's 32-column pairs [kPairs s_wk,
          // + kPairs), whose columns 8 c4 .. + 7 are one 8-byte load per token
          // (16-byte loads of four steps took more registers than the kernel
          // had when it ran three blocks per SM), and steps kQ s_wk .. + kQ -
          // 1 of the rope block, four bytes each. Offsets differ between
          // steps and pairs only in bits 4-6 (the slot within a 128-byte
          // group), so each is one base XOR a constant.
          // This warp's k16 step i with its B words for tokens g and g + 8.
          auto s_step = [&](int i, u32 k_lo, u32 k_hi) {
            u32 a_smem[4], b[4];
            if constexpr (!kQInRegisters) ldmatrix_x4(a_smem, fp8_q_at(i));
            const u32(&a)[4] = kQInRegisters ? q_reg[i] : a_smem;
            widen_fp8x4(k_lo, b[0], b[1]);
            widen_fp8x4(k_hi, b[2], b[3]);
            mma_16816<MMA>(s_acc[0], a, b[0], b[1]);
            mma_16816<MMA>(s_acc[1], a, b[2], b[3]);
          };
          const int k_row = s_wn * 16 + g;  // rows k_row and k_row + 8 share their swizzle
          const int k_first = fp8_chunk_offset<false>(k_row, 2 * s_wk * kPairs + (c4 >> 1)) + 8 * (c4 & 1);
#pragma unroll
          for (int pi = 0; pi < kPairs; ++pi) {
            // Pair s_wk kPairs + pi: chunks 2 pi and 2 pi + 1 on, four pairs to a group.
            const int at = (k_first ^ ((pi & 3) << 5)) + (pi >> 2) * 128;
            const uint2 lo = *reinterpret_cast<const uint2*>(kv + at);
            const uint2 hi = *reinterpret_cast<const uint2*>(kv + at + 8 * C::kFp8RowBytes);
#pragma unroll
            for (int j = 0; j < 2; ++j) {  // k16 step 2 (pi % 2) + j of block pi / 2 on
              s_step(2 * pi + j, j ? lo.y : lo.x, j ? hi.y : hi.x);
            }
          }
          const int k_rope = fp8_chunk_offset<false>(k_row, kLatent / 16 + s_wk * kQ) + 4 * c4;
#pragma unroll
          for (int j = 0; j < kQ; ++j) {  // rope step s_wk kQ + j
            const int at = k_rope ^ (j << 4);
            s_step(2 * kPairs + j, *reinterpret_cast<const u32*>(kv + at),
                   *reinterpret_cast<const u32*>(kv + at + 8 * C::kFp8RowBytes));
          }
        } else {
          // Warp s_wk takes k16 steps s_wk, s_wk + kWarpsK, ...: kstep % 4
          // cycles through kQ values.
          const int b_tok = s_wn * 16 + (lane & 7) + (lane >> 4) * 8;
          int a_off[kQ], b_off[kQ];
#pragma unroll
          for (int j = 0; j < kQ; ++j) {
            const int q4 = s_wk + C::kWarpsK * j;
            a_off[j] = a_slot(q4);
            b_off[j] = b_tok * 128 + (((2 * q4 + ((lane >> 3) & 1)) ^ (b_tok & 7)) << 4);
          }
#pragma unroll
          for (int i = 0; i < C::kKSteps; ++i) {
            const int block = i / kQ;
            u32 a[4], b[4];
            ldmatrix_x4(a, q_s + block * (M * 128) + a_off[i % kQ]);
            ldmatrix_x4(b, kv + block * (T * 128) + b_off[i % kQ]);
            mma_16816<MMA>(s_acc[0], a, b[0], b[1]);
            mma_16816<MMA>(s_acc[1], a, b[2], b[3]);
          }
        }
        float* sb = s_buf + s_wk * M * C::kSStride + sub * T;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = s_wn * 16 + nt * 8 + 2 * c4;
          const int r = s_mt * 16 + g;
          *reinterpret_cast<float2*>(sb + r * C::kSStride + col) = make_float2(s_acc[nt][0], s_acc[nt][1]);
          *reinterpret_cast<float2*>(sb + (r + 8) * C::kSStride + col) =
              make_float2(s_acc[nt][2], s_acc[nt][3]);
        }
      };
      s_tile(0);
      if constexpr (kSub == 2) s_tile(1);
      __syncthreads();

      {  // online softmax for (srow, stok..): P and the row's rescale factor
        const int start = w.kv_begin + it * T;
        const int bound = bound_s[srow];
        float v[C::kRowTokens];
        float tile_max = neg_inf();
        // Two tiles a step: a thread's tokens are 16-byte loads of each
        // partial sum (four tokens a thread: a row's sixteen threads read its
        // 256 bytes in two wavefronts, where four-byte loads hit each bank
        // four times). One-tile steps, four tokens a thread on 32 rows too,
        // keep the loads they were measured with.
        constexpr bool kQuadReads = C::kTilesPerStep == 2;
        constexpr int kQuads = C::kRowTokens / 4;  // per partial sum
        float4 quad[kQuadReads ? C::kWarpsK * kQuads : 1];
        if constexpr (kQuadReads) {
#pragma unroll
          for (int k = 0; k < C::kWarpsK; ++k)
#pragma unroll
            for (int j = 0; j < kQuads; ++j) {
              quad[k * kQuads + j] =
                  *reinterpret_cast<const float4*>(s_buf + (k * M + srow) * C::kSStride + stok + 4 * j);
            }
        }
#pragma unroll
        for (int i = 0; i < C::kRowTokens; ++i) {
          float s = 0.0f;
#pragma unroll
          for (int k = 0; k < C::kWarpsK; ++k) {
            if constexpr (kQuadReads) {
              const float4& q4 = quad[k * kQuads + i / 4];
              s += i % 4 == 0 ? q4.x : i % 4 == 1 ? q4.y : i % 4 == 2 ? q4.z : q4.w;
            } else {
              s += s_buf[(k * M + srow) * C::kSStride + stok + i];
            }
          }
          v[i] = start + stok + i < bound ? s * scale_log2 : neg_inf();
          tile_max = fmaxf(tile_max, v[i]);
        }
        // The row's maximum (shuffles across its threads) only when a warp
        // vote says a reference moves; the true maximum stays per thread
        // until the epilogue. Case 11 2% faster (session 12).
        m_top = fmaxf(m_top, tile_max);
        float m_new = m_run;
        if (__any_sync(0xffffffffu, passes_reference(m_run, tile_max))) {
#pragma unroll
          for (int off = C::kRowThreads / 2; off > 0; off >>= 1) {
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
          }
          m_new = next_reference_max(m_run, tile_max);
        }
        const bool any = m_new != neg_inf();
        const float alpha = rescale_factor(m_run, m_new);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < C::kRowTokens; ++i) {
          v[i] = any ? fast_exp2(v[i] - m_new) : 0.0f;
          sum += v[i];
        }
        l_run = l_run * alpha + sum;
        m_run = m_new;
        u32 packed[C::kRowTokens / 2];
#pragma unroll
        for (int i = 0; i < C::kRowTokens / 2; ++i) packed[i] = pack2<MMA>(v[2 * i], v[2 * i + 1]);
        unsigned char* dst = p_s + p_offset<C::kStepTokens>(srow, stok >> 3) + (stok & 7) * 2;
        if constexpr (C::kRowTokens == 2) {
          *reinterpret_cast<u32*>(dst) = packed[0];
        } else if constexpr (C::kRowTokens == 4) {
          *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
        } else {
          static_assert(C::kRowTokens == 8, "softmax threads own 2, 4 or 8 tokens");
          *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
        if (stok == 0) {
          alpha_s[srow] = alpha;
          if (alpha != 1.0f) atomicMax(rescale_tile_s, it);  // rows of several warps may move
        }
      }
      __syncthreads();

      // P rows as mma A fragments: lanes address rows (lane & 7) + 8 ((lane >> 3) & 1)
      // and 16-byte chunk 2 kk + (lane >> 4) of their 16-row block.
      const int pa_row = (lane & 7) + ((lane >> 3) & 1) * 8;
      int p_off[C::kStepTokens / 16];
#pragma unroll
      for (int kk = 0; kk < C::kStepTokens / 16; ++kk) {
        p_off[kk] = p_offset<C::kStepTokens>(pa_row, kk * 2 + (lane >> 4));
      }

      // O[:, 64 warp .. +64] = alpha * O + P V
      // Block-uniform skip: one shared word says whether any row moved in
      // this tile (a vote over the warp's own factors kept them live across
      // the branch, and the 80-register kernel paid for that elsewhere).
      if (*rescale_tile_s == it) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float a_lo = alpha_s[mt * 16 + g];
          const float a_hi = alpha_s[mt * 16 + g + 8];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            acc[(mt * 8 + nt) * 4] *= a_lo;
            acc[(mt * 8 + nt) * 4 + 1] *= a_lo;
            acc[(mt * 8 + nt) * 4 + 2] *= a_hi;
            acc[(mt * 8 + nt) * 4 + 3] *= a_hi;
          }
        }
      }
      // Same trick as in S: the in-block slots are fixed per thread, the
      // token and row steps are constants.
      const int v_tok = (lane & 7) + ((lane >> 3) & 1) * 8;
      int v_off[4];
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        v_off[np] = warp * (T * 128) + v_tok * 128 + (((np * 2 + (lane >> 4)) ^ (v_tok & 7)) << 4);
      }
#pragma unroll
      for (int step_kk = 0; step_kk < C::kStepTokens / 16; ++step_kk) {
        const unsigned char* kv = kv_of(step_kk / (T / 16));
        const int kk = step_kk % (T / 16);  // k16 step within that tile
        u32 pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(pa[mt], p_s + mt * 16 * (2 * C::kStepTokens) + p_off[step_kk]);
        if constexpr (KV == kKvFp8) {
          // A B fragment needs V[token][column] for tokens 2 c4 (+1) and
          // 2 c4 + 8 (+1) of the step at column g of its n8 tile: bytes of
          // four rows. Each thread loads eight bytes of each of those rows
          // (columns 8 g .. 8 g + 7 of this warp's 64) and regroups each
          // word's bytes by column (prmt), which gives the fragments of eight
          // n8 tiles whose column g is 8 g + 4 cg + j (word cg, byte j); the
          // epilogue undoes the order. n8 tile 4 cg + j of this warp.
          // Row 2 c4 + 1's slots are row 2 c4's XOR 5 (fp8_swizzle).
          const int v_even = fp8_chunk_offset<false>(kk * 16 + 2 * c4, 4 * warp + (g >> 1)) + 8 * (g & 1);
          const int v_odd = (v_even ^ (5 << 4)) + C::kFp8RowBytes;
          const uint2 r0 = *reinterpret_cast<const uint2*>(kv + v_even);
          const uint2 r1 = *reinterpret_cast<const uint2*>(kv + v_odd);
          const uint2 r8 = *reinterpret_cast<const uint2*>(kv + v_even + 8 * C::kFp8RowBytes);
          const uint2 r9 = *reinterpret_cast<const uint2*>(kv + v_odd + 8 * C::kFp8RowBytes);
#pragma unroll
          for (int cg = 0; cg < 2; ++cg) {
            const u32 t0 = cg ? r0.y : r0.x;
            const u32 t1 = cg ? r1.y : r1.x;
            const u32 t8 = cg ? r8.y : r8.x;
            const u32 t9 = cg ? r9.y : r9.x;
#pragma unroll
            for (int jp = 0; jp < 2; ++jp) {
              // Bytes 2 jp and 2 jp + 1 of both words: column 2 jp in the low half.
              const u32 sel = (2 * jp) | (2 * jp + 4) << 4 | (2 * jp + 1) << 8 | (2 * jp + 5) << 12;
              u32 lo[2], hi[2];  // [e]: columns 2 jp + e
              widen_fp8x4(byte_perm(t0, t1, sel), lo[0], lo[1]);
              widen_fp8x4(byte_perm(t8, t9, sel), hi[0], hi[1]);
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const u32 b0 = lo[e];
                const u32 b1 = hi[e];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                  mma_16816<MMA>(*reinterpret_cast<float(*)[4]>(&acc[(mt * 8 + cg * 4 + 2 * jp + e) * 4]), pa[mt], b0, b1);
                }
              }
            }
          }
        } else {
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            u32 b[4];
            ldmatrix_x4_trans(b, kv + kk * 16 * 128 + v_off[np]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              float(&lo)[4] = *reinterpret_cast<float(*)[4]>(&acc[(mt * 8 + 2 * np) * 4]);
              float(&hi)[4] = *reinterpret_cast<float(*)[4]>(&acc[(mt * 8 + 2 * np + 1) * 4]);
              mma_16816<MMA>(lo, pa[mt], b[0], b[1]);
              mma_16816<MMA>(hi, pa[mt], b[2], b[3]);
            }
          }
        }
      }
    }
  }
  if constexpr (C::kWgmma) {  // the last P V
    wgmma_wait<0>();
    pin_registers(acc);
    pin_registers(pa);
  }
  cp_async_wait<0>();

  if constexpr (C::kWgmma) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
      l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    if (wg == 0 && c4 == 0) {
      m_s[wg_row] = m_lo;
      l_s[wg_row] = l_lo;
      top_s[wg_row] = top_lo;
      m_s[wg_row + 8] = m_hi;
      l_s[wg_row + 8] = l_hi;
      top_s[wg_row + 8] = top_hi;
    }
  } else {
#pragma unroll
    for (int off = C::kRowThreads / 2; off > 0; off >>= 1) {
      l_run += __shfl_xor_sync(0xffffffffu, l_run, off);
      m_top = fmaxf(m_top, __shfl_xor_sync(0xffffffffu, m_top, off));
    }
    if (stok == 0) {
      m_s[srow] = m_run;
      l_s[srow] = l_run;
      top_s[srow] = m_top;
    }
  }
  matrix_sync();

  // Each thread's accumulators cover two rows per 16-row block and pairs of
  // columns; `out_pair` writes one pair (normalised) of one row.
  const bool direct = w.split < 0;
  auto out_pair = [&](int r, int col, float x, float y) {
    const float l = l_s[r];
    const float inv = l > 0.0f ? p.out_scale / l : 0.0f;
    if (direct) {
      u32* out = reinterpret_cast<u32*>(static_cast<u16*>(p.out) + (row0 + r) * kLatent);
      out[col / 2] = pack2<ELEM>(x * inv, y * inv);
    } else {
      *reinterpret_cast<float2*>(p.partial_out + split_entry(w, r) * kLatent + col) = make_float2(x * inv, y * inv);
    }
  };
  if constexpr (C::kWgmma) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wg_warp * 16 + g + half * 8;
      if (w.row_begin + r < rows_total) {
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          out_pair(r, wg * 256 + j * 8 + 2 * c4, acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
        }
      }
    }
  } else {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + half * 8;
        if (w.row_begin + r >= rows_total) continue;
        if constexpr (KV == kKvFp8) {
          // fp8 P V: accumulator slot e of n8 tile 4 cg + j holds column
          // 8 (2 c4 + e) + 4 cg + j of this warp's 64: four adjacent columns per (cg, e).
#pragma unroll
          for (int cg = 0; cg < 2; ++cg) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float* x = &acc[(mt * 8 + cg * 4) * 4 + 2 * half + e];
              const int col = warp * 64 + 16 * c4 + 8 * e + 4 * cg;
              out_pair(r, col, x[0], x[4]);
              out_pair(r, col + 2, x[8], x[12]);
            }
          }
        } else {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            out_pair(r, warp * 64 + nt * 8 + 2 * c4, acc[(mt * 8 + nt) * 4 + 2 * half],
                     acc[(mt * 8 + nt) * 4 + 2 * half + 1]);
          }
        }
      }
    }
  }
  if (tid < M && w.row_begin + tid < rows_total) {
    // o was normalised against the reference maximum; the stats take the
    // true one, with l moved to it.
    const float l_ref = l_s[tid];
    const float l = l_ref > 0.0f ? l_ref * exp2f(m_s[tid] - top_s[tid]) : 0.0f;
    const float m = l_ref > 0.0f ? top_s[tid] * 0.6931471805599453f : neg_inf();
    store_row_stats(p, w, row0, tid, m, l);
  }
}

// The seesaw engine: 64-row tiles of 16-bit KV in FlashMLA's layout
// (bench/prototypes/seesaw_wgmma.cu measured it first). The wgmma engine
// above splits each 32-token tile's S between its warpgroups by the
// reduction, swaps the partial sums behind a block barrier, and both run
// the same softmax. Here warpgroup 0 owns the even 64-token tiles and
// warpgroup 1 the odd ones: each computes its tile's whole S (Q and K from
// shared memory), runs its softmax and hands P to the other through shared
// memory (in its tile's rope block, which S is done with); each owns 256 of
// the 512 output columns and multiplies both tiles' P into them, its own P
// from registers, the other's from shared memory. The running maximum
// passes between the warpgroups through shared memory, so their softmaxes
// alternate and one's matrix steps run during the other's softmax.
//
// A block's two KV buffers hold a pair of tiles; each part of a buffer is
// refilled with the next pair's tile as soon as its last reader is done,
// by the warpgroup that frees it (always the same one for a part: with
// TILE_PAGES one TMA box per block from one thread, else 16-byte cp.async
// per thread with every row looked up in the page table; rows past the
// range zero-filled), completing on the part's blocks' mbarriers:
//   buffer 0, blocks 0-3 (V's left half): warpgroup 0, after its P V;
//   buffer 1, blocks 0-3 and the rope block: warpgroup 0, after P1 V1L;
//   buffer 1, blocks 4-7: warpgroup 1, after its P V;
//   buffer 0, blocks 4-8: warpgroup 1, after P0 V0R.
// Named barriers order the hand-offs: kSeesawScale0 (warpgroup 0's maxima
// and factors are out), kSeesawScale1 (warpgroup 1's), kSeesawP0 (P0 is in
// shared memory), kSeesawP1 (warpgroup 1 has issued P0 V0R; its P1 went
// out before). Each is used once per pair in this order, so no warpgroup
// can arrive twice before the other has waited once.
constexpr int kSeesawScale0 = 1, kSeesawScale1 = 2, kSeesawP0 = 3, kSeesawP1 = 4;
constexpr int kSeesawCopy0 = 5;  // + warpgroup: TILE_PAGES's per-thread copies of a tile past the range

// TILE_PAGES: every 64-token tile of the item lies in one page (pages hold
// whole tiles and the range starts on a tile; decode_item decides), so the
// copies look up one page per tile, not one per row. ncu put the per-row
// copies' integer work among what separated this engine from its prototype
// (session 25); a build per path, chosen once per block, took case 1 from
// ~315 to ~297 us (session 26), where a runtime flag with both paths in one
// loop had made the memory-bound cases 10-12% slower. A tile inside the
// item's range then arrives by TMA, one 64 x 64 box per block from one
// thread (case 1 ~4%, case 2 ~5% faster than per-thread copies; session
// 27); a tile past the range keeps the per-thread copies, which zero-fill.
template <int PAGE, int ELEM, bool TILE_PAGES>
__device__ __forceinline__ void decode_tile_seesaw(const Params& p, const KvTensorMap* kv_map) {
  typedef SeesawLayout L;
  constexpr int T = L::kTileTokens;
  constexpr int kRope = L::kBlocks - 1;  // each warpgroup's P lives in its tile's rope block
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* q_s = smem + L::kQOffset;
  auto kv_s = [&](int buf) { return smem + L::kKvOffset + buf * L::kTileBytes; };
  const u32 bar0 = smem_addr(smem + L::kBarrierOffset);
  auto bar = [&](int buf, int block) { return bar0 + 8 * (buf * L::kBlocks + block); };
  int* bound_s = reinterpret_cast<int*>(smem + L::kRowInfoOffset);
  float* m_s = reinterpret_cast<float*>(bound_s + 64);  // running maximum, scaled, log2 units
  float* scale0_s = m_s + 64;
  float* scale1_s = scale0_s + 64;
  float* l_s = scale1_s + 64;  // [warpgroup][row]

  const WorkItem w = p.items[blockIdx.x];
  const int tid = threadIdx.x;
  // Broadcast from lane 0: a warp-uniform value keeps descriptors uniform.
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int t = tid & 127;
  const int lane = tid & 31;
  const int g = lane >> 2, c4 = lane & 3;
  const int row_lo = (t >> 5) * 16 + g, row_hi = row_lo + 8;
  const int rows_total = w.q_len * p.heads;
  const long long row0 = static_cast<long long>(w.token_offset) * p.heads + w.row_begin;
  const int n_tiles = w.kv_end > w.kv_begin ? (w.kv_end - w.kv_begin + T - 1) / T : 0;
  const int pairs = (n_tiles + 1) / 2;  // an odd count's last pair has an empty, zero-filled second tile
  const int* page_row = p.page_table + static_cast<long long>(w.request) * p.page_table_stride;
  const unsigned char* pool = static_cast<const unsigned char*>(p.pool);

  if (tid == 0) {
    for (int i = 0; i < 2 * L::kBlocks; ++i) mbarrier_init(bar0 + 8 * i, TILE_PAGES ? 1 : 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (tid < 64) {
    // Rows past the request's last see the whole range (their Q is zero:
    // finite S), so their warps skip the masking in full tiles too.
    bound_s[tid] = row_kv_bound(p, w, tid, rows_total, w.kv_end);
    m_s[tid] = neg_inf();
  }
  // Q: eight threads to a row, each every eighth chunk; rows past the
  // request's last are zero (finite S).
  {
    const int sub = tid & 7;
    const unsigned char* q = static_cast<const unsigned char*>(p.q);
    for (int r = tid >> 3; r < 64; r += 32) {
      const bool valid = w.row_begin + r < rows_total;
      const unsigned char* src = valid ? q + (row0 + r) * kRowBytes16 + sub * 16 : q;
#pragma unroll
      for (int k = 0; k < L::kBlocks; ++k) {
        cp_async_16(q_s + k * L::kBlockBytes + r * 128 + ((sub ^ (r & 7)) << 4), valid ? src + 128 * k : src, valid);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
  }
  __syncthreads();
  const int bound_lo = bound_s[row_lo], bound_hi = bound_s[row_hi];
  // The warp's first masked position: one branch for the warp, whose
  // threads' rows differ in their bounds.
  const int warp_bound = __reduce_min_sync(0xffffffffu, bound_lo < bound_hi ? bound_lo : bound_hi);

  // KV copies: thread t of the issuing warpgroup takes chunk t % 8 of every
  // block of rows t / 8 + 16 u. Page ids are looked up a pair ahead, one
  // per row, or with TILE_PAGES one per tile (pages[0]). Positions are
  // unsigned: PAGE's divisions become shifts and masks.
  const int copy_sub = t & 7;
  auto page_of = [&](int tile, int u) {
    const unsigned pos = static_cast<unsigned>(w.kv_begin + tile * T + (t >> 3) + 16 * u);
    return pos < static_cast<unsigned>(w.kv_end) ? page_row[pos / PAGE] : -1;
  };
  // Blocks [first, last) and `extra` (if >= 0) of tile `tile` into buffer `buf`.
  auto load_part = [&](int buf, int tile, int first, int last, int extra, const int (&pages)[4]) {
    unsigned char* dst = kv_s(buf);
    // TILE_PAGES: the tile's first position and its pool slot (rows follow on).
    const unsigned start = static_cast<unsigned>(w.kv_begin + tile * T);
    auto tile_slot = [&]() { return static_cast<long long>(pages[0]) * PAGE + start % PAGE; };
    if constexpr (TILE_PAGES) {
      // A tile inside the range: one thread, one box per block.
      if (static_cast<int>(start) + T <= w.kv_end) {
        if (t == 0) {
          const int y = static_cast<int>(tile_slot());
          auto box = [&](int k) {
            mbarrier_arrive_expect_tx(bar(buf, k), L::kBlockBytes);
            tma_load_2d(dst + k * L::kBlockBytes, kv_map, 64 * k, y, bar(buf, k));
          };
          for (int k = first; k < last; ++k) box(k);
          if (extra >= 0) box(extra);
        }
        return;
      }
    }
    // Row r of the tile from pool slot `slot` (zero-filled where not valid).
    auto copy_row = [&](int r, bool valid, long long slot) {
      const unsigned char* src = pool + slot * kRowBytes16 + copy_sub * 16;
      const int at = r * 128 + ((copy_sub ^ (r & 7)) << 4);
      for (int k = first; k < last; ++k) cp_async_16(dst + k * L::kBlockBytes + at, src + 128 * k, valid);
      if (extra >= 0) cp_async_16(dst + extra * L::kBlockBytes + at, src + 128 * extra, valid);
    };
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int r = (t >> 3) + 16 * u;
      if constexpr (TILE_PAGES) {
        const bool valid = static_cast<int>(start) + r < w.kv_end;
        copy_row(r, valid, valid ? tile_slot() + r : 0);
      } else {
        const bool valid = pages[u] >= 0;
        const unsigned pos = static_cast<unsigned>(w.kv_begin + tile * T + r);
        copy_row(r, valid, valid ? static_cast<long long>(pages[u]) * PAGE + pos % PAGE : 0);
      }
    }
    if constexpr (TILE_PAGES) {
      // Past the range (zero rows): counted arrivals, then the one arrival a
      // phase expects once every thread's are in.
      for (int k = first; k < last; ++k) cp_async_arrive_counted(bar(buf, k));
      if (extra >= 0) cp_async_arrive_counted(bar(buf, extra));
      named_barrier_sync(kSeesawCopy0 + wg, 128);
      if (t == 0) {
        for (int k = first; k < last; ++k) mbarrier_arrive(bar(buf, k));
        if (extra >= 0) mbarrier_arrive(bar(buf, extra));
      }
    } else {
      for (int k = first; k < last; ++k) cp_async_arrive(bar(buf, k));
      if (extra >= 0) cp_async_arrive(bar(buf, extra));
    }
  };
  // This warpgroup's parts of a pair's two tiles (see above).
  auto load_pair_parts = [&](int pair, const int (&pages0)[4], const int (&pages1)[4]) {
    if (wg == 0) {
      load_part(0, 2 * pair, 0, 4, -1, pages0);
      load_part(1, 2 * pair + 1, 0, 4, kRope, pages1);
    } else {
      load_part(1, 2 * pair + 1, 4, 8, -1, pages1);
      load_part(0, 2 * pair, 4, L::kBlocks, -1, pages0);
    }
  };
  int pages0[4], pages1[4];  // this thread's rows of the next pair's tiles
  auto look_up_pair = [&](int pair) {
    if constexpr (TILE_PAGES) {
      // A tile's first position: the page of all its rows.
      auto tile_page = [&](int tile) {
        const unsigned pos = static_cast<unsigned>(w.kv_begin + tile * T);
        return pos < static_cast<unsigned>(w.kv_end) ? page_row[pos / PAGE] : -1;
      };
      pages0[0] = tile_page(2 * pair);
      pages1[0] = tile_page(2 * pair + 1);
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        pages0[u] = page_of(2 * pair, u);
        pages1[u] = page_of(2 * pair + 1, u);
      }
    }
  };
  if (pairs > 0) {
    look_up_pair(0);
    load_pair_parts(0, pages0, pages1);
    look_up_pair(1);
  }

  // Descriptors are linear in the address: each step adds a constant to a
  // base, laundered where it is used (hoisted, a tile's 72 S descriptors
  // would take 144 registers).
  const u64 q_desc = smem_desc(q_s, 16, 1024);
  const u64 k_desc = smem_desc(kv_s(wg), 16, 1024);
  const u64 v_desc = smem_desc(kv_s(0) + 4 * wg * L::kBlockBytes, L::kBlockBytes, 1024);
  const u64 p_desc = smem_desc(kv_s(wg ^ 1) + kRope * L::kBlockBytes, 16, 1024);
  auto v_at = [&](int buf, int kk) { return v_desc + static_cast<u64>((buf * L::kTileBytes + kk * 16 * 128) >> 4); };

  float o[128];  // rows row_lo (4 j + e) and row_hi (4 j + 2 + e), columns 256 wg + 8 j + 2 c4 + e
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float s[32];    // S, then P, of this warpgroup's tile: columns 8 j + 2 c4 + e
  u32 pa[4][4];   // P as wgmma A fragments, k16 step kk: 8-token groups 2 kk, 2 kk + 1
  float l_lo = 0.0f, l_hi = 0.0f;  // this thread's tokens of this warpgroup's tiles

  // S of this warpgroup's tile over blocks [first, last), each behind its
  // block's mbarrier, one commit group per block.
  auto issue_s = [&](int first, int last, u32 parity, bool fresh) {
    const u64 qd = launder(q_desc), kd = launder(k_desc);
#pragma unroll
    for (int k = first; k < last; ++k) {
      mbarrier_wait(bar(wg, k), parity);
      fence_proxy_async();  // the copies are generic-proxy writes; wgmma reads through the async proxy
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u64 step = static_cast<u64>((k * L::kBlockBytes + kk * 32) >> 4);
        wgmma_m64n64k16_ss<ELEM>(s, qd + step, kd + step, (fresh && k == first && kk == 0) ? 0 : 1);
      }
      wgmma_commit();
    }
  };
  auto issue_pv_own = [&]() {
    pin_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64n256k16_rs<ELEM>(o, pa[kk], v_at(wg, kk));
    wgmma_commit();
  };
  auto issue_pv_other = [&]() {
    pin_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64n256k16_ss<ELEM>(o, p_desc + static_cast<u64>(2 * kk), v_at(wg ^ 1, kk));
    wgmma_commit();
  };
  // Masks S of `tile` past each row's bound, moves the running maxima
  // (m_s) past it, and turns S into P (float in s, 16-bit in pa). Returns
  // the rows' old-to-new factors and P's sums over this thread's tokens.
  auto softmax = [&](int tile, float& f_lo, float& f_hi, float& sum_lo, float& sum_hi) {
    const int start = w.kv_begin + tile * T;
    if (start + T > warp_bound) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int pos = start + 8 * j + 2 * c4 + e;
          if (pos >= bound_lo) s[4 * j + e] = neg_inf();
          if (pos >= bound_hi) s[4 * j + 2 + e] = neg_inf();
        }
      }
    }
    // Maxima of the unscaled S (the scale is positive), over the quad.
    float mx_lo = neg_inf(), mx_hi = neg_inf();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      mx_lo = fmaxf(mx_lo, fmaxf(s[4 * j], s[4 * j + 1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float old_lo = m_s[row_lo], old_hi = m_s[row_hi];
    const float new_lo = fmaxf(old_lo, mx_lo * p.scale_log2);
    const float new_hi = fmaxf(old_hi, mx_hi * p.scale_log2);
    // A row that has seen nothing subtracts 0: its -inf positions give 0.
    const float sub_lo = new_lo == neg_inf() ? 0.0f : new_lo;
    const float sub_hi = new_hi == neg_inf() ? 0.0f : new_hi;
    f_lo = fast_exp2(old_lo - sub_lo);
    f_hi = fast_exp2(old_hi - sub_hi);
    __syncwarp();  // the quad has read m_s; its four threads write the same values
    m_s[row_lo] = new_lo;
    m_s[row_hi] = new_hi;
    sum_lo = 0.0f;
    sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * j + e] = fast_exp2(fmaf(s[4 * j + e], p.scale_log2, -sub_lo));
        s[4 * j + 2 + e] = fast_exp2(fmaf(s[4 * j + 2 + e], p.scale_log2, -sub_hi));
        sum_lo += s[4 * j + e];
        sum_hi += s[4 * j + 2 + e];
      }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) pa[kk][i] = pack2<ELEM>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
  };
  auto scale_o = [&](float f_lo, float f_hi) { rescale_o_half(o, f_lo, f_hi); };
  // P (times per-row factors) into this warpgroup's rope block, K-major and
  // swizzled like Q, for the other warpgroup's P V: its A fragments as they
  // are where the warp's factors are all 1, as on most pairs.
  auto store_p = [&](float f_lo, float f_hi) {
    unsigned char* dst = kv_s(wg) + kRope * L::kBlockBytes;
    const bool as_is = __all_sync(0xffffffffu, f_lo == 1.0f && f_hi == 1.0f);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // 8-token group j = 2 kk + h
        const int j = 2 * kk + h;
        const u32 lo = as_is ? pa[kk][2 * h] : pack2<ELEM>(s[4 * j] * f_lo, s[4 * j + 1] * f_lo);
        const u32 hi = as_is ? pa[kk][2 * h + 1] : pack2<ELEM>(s[4 * j + 2] * f_hi, s[4 * j + 3] * f_hi);
        *reinterpret_cast<u32*>(dst + row_lo * 128 + ((j ^ (row_lo & 7)) << 4) + 4 * c4) = lo;
        *reinterpret_cast<u32*>(dst + row_hi * 128 + ((j ^ (row_hi & 7)) << 4) + 4 * c4) = hi;
      }
    }
  };

  if (pairs > 0) {
    issue_s(0, L::kBlocks, 0, true);
    wgmma_wait<0>();
    pin_registers(s);
  }
  for (int i = 0; i < pairs; ++i) {
    const bool last = i + 1 == pairs;
    const u32 next_parity = (i + 1) & 1;
    float f_lo, f_hi, sum_lo, sum_hi;
    if (wg == 0) {
      softmax(2 * i, f_lo, f_hi, sum_lo, sum_hi);
      scale0_s[row_lo] = f_lo;  // the quad's threads write the same value
      scale0_s[row_hi] = f_hi;
      named_barrier_arrive(kSeesawScale0, kThreads);
      scale_o(f_lo, f_hi);
      l_lo = l_lo * f_lo + sum_lo;
      l_hi = l_hi * f_hi + sum_hi;
      issue_pv_own();
      wgmma_wait<0>();
      pin_registers(o);
      // Buffer 0's left half is free. TMA copies are issued by one thread
      // in a few instructions: at once, so they land before S of the next
      // tile needs them. Per-thread copies would hold up P0's hand-off,
      // which warpgroup 1 waits for: after it (session 25).
      if constexpr (TILE_PAGES) {
        if (!last) load_part(0, 2 * i + 2, 0, 4, -1, pages0);
      }
      named_barrier_sync(kSeesawScale1, kThreads);
      // P0 moves to the pair's final maxima before it goes out (warpgroup 1
      // waits for it); O and l follow.
      const float g_lo = scale1_s[row_lo], g_hi = scale1_s[row_hi];
      store_p(g_lo, g_hi);
      fence_proxy_async();
      named_barrier_arrive(kSeesawP0, kThreads);
      if constexpr (!TILE_PAGES) {
        if (!last) load_part(0, 2 * i + 2, 0, 4, -1, pages0);
      }
      named_barrier_sync(kSeesawP1, kThreads);
      scale_o(g_lo, g_hi);
      l_lo *= g_lo;
      l_hi *= g_hi;
      issue_pv_other();
      if (!last) {
        issue_s(0, 4, next_parity, true);
        wgmma_wait<4>();  // P1 V1L: buffer 1's left half and P1's block are free
        load_part(1, 2 * i + 3, 0, 4, kRope, pages1);
        issue_s(4, L::kBlocks, next_parity, false);
      }
      // Each branch waits for its own matrix steps: waited for after the
      // branches join, ptxas serialised the wgmmas (C7515).
      wgmma_wait<0>();
      pin_registers(o);
      pin_registers(s);
    } else {
      named_barrier_sync(kSeesawScale0, kThreads);
      softmax(2 * i + 1, f_lo, f_hi, sum_lo, sum_hi);
      scale1_s[row_lo] = f_lo;
      scale1_s[row_hi] = f_hi;
      const float h_lo = f_lo * scale0_s[row_lo], h_hi = f_hi * scale0_s[row_hi];
      named_barrier_arrive(kSeesawScale1, kThreads);
      scale_o(h_lo, h_hi);
      l_lo = l_lo * h_lo + sum_lo;
      l_hi = l_hi * h_hi + sum_hi;
      store_p(1.0f, 1.0f);
      issue_pv_own();
      fence_proxy_async();
      named_barrier_sync(kSeesawP0, kThreads);
      issue_pv_other();
      named_barrier_arrive(kSeesawP1, kThreads);
      if (!last) {
        wgmma_wait<1>();  // P1 V1R: buffer 1's right half is free
        load_part(1, 2 * i + 3, 4, 8, -1, pages1);
        wgmma_wait<0>();  // P0 V0R: buffer 0's right half and P0's block are free
        load_part(0, 2 * i + 2, 4, L::kBlocks, -1, pages0);
        // Blocks 4-7 first: this warpgroup copied them after P1 V1R, while
        // warpgroup 0 copies blocks 0-3 and the rope block only once its
        // P1 V1L is done, and ncu found this wait the kernel's longest.
        issue_s(4, 8, next_parity, true);
        issue_s(0, 4, next_parity, false);
        issue_s(8, L::kBlocks, next_parity, false);
      }
      wgmma_wait<0>();
      pin_registers(o);
      pin_registers(s);
    }
    // The pages of the pair after the next, for the next pair's copies.
    if (i + 2 < pairs) look_up_pair(i + 2);
  }

  // l: the quad's partial sums, then the two warpgroups' (each has its own tiles').
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  if (c4 == 0) {
    l_s[wg * 64 + row_lo] = l_lo;
    l_s[wg * 64 + row_hi] = l_hi;
  }
  __syncthreads();
  const bool direct = w.split < 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half ? row_hi : row_lo;
    if (w.row_begin + r >= rows_total) continue;
    const float l = l_s[r] + l_s[64 + r];
    const float inv = l > 0.0f ? p.out_scale / l : 0.0f;
    if (direct) {
      u32* out = reinterpret_cast<u32*>(static_cast<u16*>(p.out) + (row0 + r) * kLatent + 256 * wg + 2 * c4);
#pragma unroll
      for (int j = 0; j < 32; ++j) out[4 * j] = pack2<ELEM>(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
    } else {
      float* out = p.partial_out + split_entry(w, r) * kLatent + 256 * wg + 2 * c4;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(out + 8 * j) = make_float2(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
      }
    }
  }
  if (tid < 64 && w.row_begin + tid < rows_total) {
    // The running maximum is the true one (rescaling is exact): the stats take it as it is.
    const float l = l_s[tid] + l_s[64 + tid];
    const float m = l > 0.0f ? m_s[tid] * 0.6931471805599453f : neg_inf();
    store_row_stats(p, w, row0, tid, m, l);
  }
}

// The fp8-steps engine: 16-row tiles of fp8 KV whose matrix steps take
// e4m3 operands (bench/prototypes/swapped_fp8_native.cu measured it first:
// case 11's shape 164 us against 187 for the mma.sync engine). The tokens
// are wgmma's M and the tile's rows its N, so nothing is padded; K is
// wgmma's A straight from shared memory and V^T its A from registers
// (byte pairs transposed by ldmatrix, then bytes by prmt), so no KV byte
// is widened; Q and P are split into e4m3 parts, entered side by side
// (S: Q in three, N = 48, 12 significant bits: bf16's 8 exactly, so S,
// and the statistics' maximum, match the 16-bit engines, with S's 18
// steps in six float32-summed chunks against the fp8 accumulator's 14
// bits) or as a doubled reduction (P V, P in two):
//
//   S^T[64 x 48] = K [Qhi Qmid Qlo]^T       (row n: columns n, 16 + n, 32 + n)
//   O^T[512 x 16] += V^T Phi^T + V^T Plo^T   (Phi in e5m2 for its range)
//
// Each warpgroup owns every other 64-token tile of the item, with its own
// reference maxima, sums and O^T (64 registers for 512 latents), so the
// two never wait for each other inside the loop; warpgroup 1 hands its
// state to warpgroup 0 at the end, which writes the rows. KV arrives by
// per-thread copies into four stages (two per warpgroup) laid out for
// wgmma: four 128-byte column blocks with the 128-byte swizzle and the
// rope block with the 64-byte one; a warp copies whole rows, consecutive
// lanes consecutive 16-byte chunks (two threads a row cost four times the
// shared-memory wavefronts: one per row's line).

// Byte c of row r in a 128-byte-swizzled block, and in a 64-byte-swizzled
// one. swizzle128 is swizzled's pattern at byte grain, written out: built
// on swizzled, the engine's kernels took ~50 more instructions (session 29).
__device__ __forceinline__ int swizzle128(int r, int c) { return r * 128 + ((((c >> 4) ^ r) & 7) << 4) + (c & 15); }
__device__ __forceinline__ int swizzle64(int r, int c) { return r * 64 + ((((c >> 4) ^ (r >> 1)) & 3) << 4) + (c & 15); }
// K-major descriptors of this engine's operands: 8-row strides of 1024
// bytes (128-byte swizzle) and 512 (64-byte swizzle, the rope blocks).
__device__ __forceinline__ u64 smem_desc_sw128(u32 addr) { return smem_desc_at<1>(addr, 16, 1024); }
__device__ __forceinline__ u64 smem_desc_sw64(u32 addr) { return smem_desc_at<2>(addr, 16, 512); }
// The descriptors of one operand's matrix steps from one base address. The
// address field is addr >> 4 in the low 14 bits and shared addresses stay
// under 256 KB, so offset >> 4 added to the low word never carries into
// the leading-byte field: a step's descriptor is one add, where built from
// its address it took five uniform instructions (session 33).
template <u32 SWIZZLE, u32 STRIDE>
struct SmemDescFrom {
  u32 lo;
  __device__ __forceinline__ explicit SmemDescFrom(u32 addr)
      : lo(static_cast<u32>(smem_desc_at<SWIZZLE>(addr, 16, STRIDE))) {}
  __device__ __forceinline__ u64 operator()(u32 offset) const {
    constexpr u64 kHigh = smem_desc_at<SWIZZLE>(0, 16, STRIDE) >> 32 << 32;
    return kHigh | (lo + (offset >> 4));
  }
};
typedef SmemDescFrom<1, 1024> Sw128Descs;
typedef SmemDescFrom<2, 512> Sw64Descs;
// A packed pair of ELEM to floats, the low half first.
template <int ELEM>
__device__ __forceinline__ void unpack2(u32 x, float& lo, float& hi) {
  if constexpr (ELEM == kElemBf16) {
    lo = __int_as_float(static_cast<int>(x << 16));
    hi = __int_as_float(static_cast<int>(x & 0xFFFF0000u));
  } else {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}\n"
        : "=f"(lo), "=f"(hi)
        : "r"(x));
  }
}
// Two floats to fp8 bytes (e5m2 or e4m3), `lo` in the low byte, and back.
template <bool E5M2>
__device__ __forceinline__ u16 to_fp8x2(float lo, float hi) {
  u16 d;
  if constexpr (E5M2) {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  }
  return d;
}
template <bool E5M2>
__device__ __forceinline__ void from_fp8x2(u16 x, float& lo, float& hi) {
  u32 h2;
  if constexpr (E5M2) {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h2) : "h"(x));
  } else {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(x));
  }
  unpack2<kElemFp16>(h2, lo, hi);
}
// S^T: D[64 x 48] (+)= A[64 x 32] B[48 x 32]^T, e4m3, both in shared memory.
__device__ __forceinline__ void wgmma_m64n48k32_e4m3_ss(float (&d)[24], u64 desc_a, u64 desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, %24, %25, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
// P V: D[64 x 16] += A[64 x 32] (registers, e4m3) B[16 x 32]^T (shared
// memory, e5m2 for P's high part, else e4m3).
template <bool B_E5M2>
__device__ __forceinline__ void wgmma_m64n16k32_fp8_rs(float (&d)[8], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_M64N16K32_RS(BTYPE)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3." BTYPE " "                           \
               "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1;\n}\n"                         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
                 "+f"(d[7])                                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (B_E5M2) {
    HMLA_TC_M64N16K32_RS("e5m2");
  } else {
    HMLA_TC_M64N16K32_RS("e4m3");
  }
#undef HMLA_TC_M64N16K32_RS
}
// The same as wgmma_m64n48k32_e4m3_ss, a sum's first step (ACCUMULATE
// false) taking D as an output only: summed in float32 between chunks, a
// single accumulator set read and written by every step, its first one
// by a predicate, came out of ptxas adding a doubled earlier chunk at
// each fold (the 48-row engine's GPU test, session 30).
#define HMLA_TC_D24_OPERANDS(D) \
  D(d[0]), D(d[1]), D(d[2]), D(d[3]), D(d[4]), D(d[5]), D(d[6]), D(d[7]), D(d[8]), D(d[9]), D(d[10]), \
      D(d[11]), D(d[12]), D(d[13]), D(d[14]), D(d[15]), D(d[16]), D(d[17]), D(d[18]), D(d[19]), \
      D(d[20]), D(d[21]), D(d[22]), D(d[23])
#define HMLA_TC_D24_READ_WRITE(x) "+f"(x)
#define HMLA_TC_D24_WRITE(x) "=f"(x)
template <bool ACCUMULATE>
__device__ __forceinline__ void wgmma_m64n48k32_e4m3_ss(float (&d)[24], u64 desc_a, u64 desc_b) {
#define HMLA_TC_M64N48K32_SS(D, SCALE_D)                                 \
  asm volatile("wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 "    \
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, " \
               "%24, %25, " SCALE_D ", 1, 1;\n"                           \
               : HMLA_TC_D24_OPERANDS(D)                                  \
               : "l"(desc_a), "l"(desc_b))
  if constexpr (ACCUMULATE) {
    HMLA_TC_M64N48K32_SS(HMLA_TC_D24_READ_WRITE, "1");
  } else {
    HMLA_TC_M64N48K32_SS(HMLA_TC_D24_WRITE, "0");
  }
#undef HMLA_TC_M64N48K32_SS
}
#undef HMLA_TC_D24_WRITE
#undef HMLA_TC_D24_READ_WRITE
#undef HMLA_TC_D24_OPERANDS
// P V of 48 rows: D[64 x 48] += A[64 x 32] (registers, e4m3) B[48 x 32]^T
// (shared memory, e5m2 for P's high part, else e4m3).
template <bool B_E5M2>
__device__ __forceinline__ void wgmma_m64n48k32_fp8_rs(float (&d)[24], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_M64N48K32_RS(BTYPE)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                           \
               "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3." BTYPE " "         \
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, " \
               "{%24,%25,%26,%27}, %28, p, 1, 1;\n}\n"                             \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
                 "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
                 "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (B_E5M2) {
    HMLA_TC_M64N48K32_RS("e5m2");
  } else {
    HMLA_TC_M64N48K32_RS("e4m3");
  }
#undef HMLA_TC_M64N48K32_RS
}
// A warpgroup's own barrier (ids kFp8StepsBarrier0 + warpgroup). The
// 48-row build's block meets at kFp8StepsBlockBarrier, and its warpgroups
// at their own above it.
constexpr int kFp8StepsBarrier0 = 1;
constexpr int kFp8StepsBlockBarrier = 1;
// Named barrier `id` of THREADS threads with an OR of a predicate over them.
template <int THREADS>
__device__ __forceinline__ bool barrier_any(int id, bool p) {
  u32 r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<u32>(p)), "r"(id), "n"(THREADS)
      : "memory");
  return r != 0;
}

// The fp8-steps engines' shared pieces.
// Where the fp8-steps engines' copies find a tile's rows in the pool. Lane
// l of a warp copying rows 16 w .. 16 w + 15 looks up the page of row
// 16 w + (l & 15) when a refill is decided, a stage's work before the copy
// (`lookup`), and keeps the raw page id: the load's latency then hides
// until the copy. A slot computed at the lookup stalled there (3% of case
// 10's samples; keeping the raw id took case 10 from 293 to 284 us and
// case 11 from 163 to 154-156). The copy passes slots on by shuffle (`slot`).
template <int PAGE, int T>
struct Fp8StepsRows {
  const WorkItem& w;
  const int* page_row;
  int lane_row;  // 16 w + (l & 15)

  __device__ __forceinline__ Fp8StepsRows(const WorkItem& item, const int* pages, int warp, int lane)
      : w(item), page_row(pages), lane_row(16 * warp + (lane & 15)) {}
  // The page of this lane's row of tile `tile`, -1 past the item's range.
  __device__ __forceinline__ int lookup(int tile) const {
    const unsigned pos = static_cast<unsigned>(w.kv_begin + tile * T + lane_row);
    return pos < static_cast<unsigned>(w.kv_end) ? page_row[pos / PAGE] : -1;
  }
  // The pool slot of row 16 w + `row` of tile `tile` (`row` < 16, per
  // lane), -1 past the range; `page` is this lane's lookup of the tile.
  __device__ __forceinline__ int slot(int tile, int page, int row) const {
    const unsigned pos = static_cast<unsigned>(w.kv_begin + tile * T + lane_row);
    return __shfl_sync(0xffffffffu, page < 0 ? -1 : page * PAGE + static_cast<int>(pos % PAGE), row);
  }
};
// P at two positions of one row (`a`, `b`) in P^T's two parts, `a` in the
// low byte of each: the high part in e5m2 (P runs from 2^8 down past 2^-16
// before it is lost; in e4m3 it was lost below about 2^-10, a long tail's
// whole mass under one dominant token), the rest in e4m3; together about 8
// significant bits. By way of f16, where P <= 2^8 fits and the rest after
// the high part is exact: five instructions a pair, seven through float32.
__device__ __forceinline__ void p_parts(float a, float b, u16& hi, u16& lo) {
  asm("{\n .reg .b32 h, back;\n .reg .b16 h8, zero;\n"
      " cvt.rn.f16x2.f32 h, %3, %2;\n"
      " cvt.rn.satfinite.e5m2x2.f16x2 h8, h;\n"
      " mov.b16 zero, 0;\n"
      " mov.b32 back, {h8, zero};\n"
      " prmt.b32 back, back, 0, 0x1404;\n"  // e5m2 is f16's high byte
      " sub.rn.f16x2 h, h, back;\n"
      " cvt.rn.satfinite.e4m3x2.f16x2 %1, h;\n"
      " mov.b16 %0, h8;\n}\n"
      : "=h"(hi), "=h"(lo)
      : "f"(a), "f"(b));
}
// P^T of a thread's S^T (s[4 j + 2 h + e]: token rows g + 8 h, row
// 8 j + 2 c4 + e), P = 2^(s scale - sub) per row, made visible to the
// matrix steps; l_part: each row's sum. The thread's two tokens are byte
// positions 16 warp + 2 g, + 1 of its rows (the order V^T's fragments take,
// vt_latent), so each 8-row block of a part is an 8 x 8 matrix of byte
// pairs transposed: COLS / 4 stmatrix stores where 2 COLS 16-bit ones and
// their addresses took 60 instructions a tile for 48 rows.
template <int COLS>
__device__ __forceinline__ void store_p_tile(u32 p_buf, const float (&s)[2 * COLS], const float (&scale)[COLS],
                                             const float (&sub)[COLS], int lane, int warp, float (&l_part)[COLS]) {
  constexpr int kBlocks = COLS / 2;  // 8-row blocks; matrices 0 .. kBlocks - 1 the high part, then the rest
  static_assert(COLS % 4 == 0, "whole four-matrix stores");
  u32 m[COLS];
#pragma unroll
  for (int j = 0; j < kBlocks; ++j) {
    u16 hi[2], lo[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 2 * j + e, i = 4 * j + e;
      const float a = fast_exp2(fmaf(s[i], scale[c], -sub[c])), b = fast_exp2(fmaf(s[i + 2], scale[c], -sub[c]));
      l_part[c] = a + b;
      p_parts(a, b, hi[e], lo[e]);
    }
    m[j] = static_cast<u32>(hi[0]) | static_cast<u32>(hi[1]) << 16;
    m[kBlocks + j] = static_cast<u32>(lo[0]) | static_cast<u32>(lo[1]) << 16;
  }
  // Lane 8 k + r names row r of matrix 4 i + k: P^T row 8 j + r, its
  // 16-byte column `warp` (high part) or 4 + warp, swizzled as swizzle128.
  const int r = lane & 7, k = lane >> 3;
  const u32 row = p_buf + r * 128 + (((warp ^ r) & 7) << 4);
#pragma unroll
  for (int i = 0; i < COLS / 4; ++i) {
    const int mi = 4 * i + k;
    const u32 at = mi < kBlocks ? row + 1024 * mi : (row ^ 64) + 1024 * (mi - kBlocks);
    stmatrix_x4_trans(at, m[4 * i], m[4 * i + 1], m[4 * i + 2], m[4 * i + 3]);
  }
  fence_proxy_async();
}
// The rare path of both fp8-steps engines, once a row passed its reference
// maximum: each row's maximum over WARPS warps from warp k0 on (lanes by
// shuffle, then the warps' maxima through scratch: row n of warp k at
// scratch[k R + n]; `warp_index` is this warp's k), the references moved
// as next_reference_max says, and O (M_BLOCKS m-blocks of 2 COLS
// accumulators) and l rescaled with them. `thread_max(c)`: this thread's
// maximum of row c in the references' units.
template <int R, int WARPS, int COLS, int M_BLOCKS, class ThreadMax>
__device__ __forceinline__ void move_references(ThreadMax thread_max, float* scratch, int warp_index, int k0,
                                                int barrier, int g, int c4, float (&m_ref)[COLS],
                                                float (&l_run)[COLS], float (&o)[M_BLOCKS][2 * COLS]) {
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    float mx = thread_max(c);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    if (g == 0) scratch[warp_index * R + 8 * (c / 2) + 2 * c4 + (c & 1)] = mx;
  }
  named_barrier_sync(barrier, 32 * WARPS);
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    const int n = 8 * (c / 2) + 2 * c4 + (c & 1);
    float mx = neg_inf();
#pragma unroll
    for (int k = 0; k < WARPS; ++k) mx = fmaxf(mx, scratch[(k0 + k) * R + n]);
    const float next = next_reference_max(m_ref[c], mx);
    const float f = rescale_factor(m_ref[c], next);
    m_ref[c] = next;
    l_run[c] *= f;
#pragma unroll
    for (int m = 0; m < M_BLOCKS; ++m) {
      o[m][4 * (c / 2) + (c & 1)] *= f;
      o[m][4 * (c / 2) + 2 + (c & 1)] *= f;
    }
  }
}
// The descriptors of S's matrix steps in the fp8-steps engines: step k of
// the 18 takes 32 columns of the KV tile's and Q's 128-column blocks
// (128-byte swizzle) or, from step 16 on, of their rope blocks (64-byte).
// `q_blocks` and `q_rope`: Q's part in the blocks and in the rope.
template <class L>
struct SStepDescs {
  Sw128Descs k_main, q_main;
  Sw64Descs k_rope, q_rope;
  __device__ __forceinline__ SStepDescs(u32 stage, u32 q_blocks, u32 q_rope_addr)
      : k_main(stage), q_main(q_blocks), k_rope(stage + L::kRopeOffset), q_rope(q_rope_addr) {}
  __device__ __forceinline__ u64 k(int step) const {
    const int block = step / 4, k = step % 4;
    return block < 4 ? k_main(block * L::kBlockBytes + 32 * k) : k_rope(32 * k);
  }
  __device__ __forceinline__ u64 q(int step) const {
    const int block = step / 4, k = step % 4;
    return block < 4 ? q_main(block * L::kQBlockBytes + 32 * k) : q_rope(32 * k);
  }
};
// A query row for the fp8-steps engines' Q parts, a warp per row: this
// lane's 18 values (pairs lane + 32 k, zero where the row is past the
// request's last) and q_scale, a power of two that puts the row's largest
// magnitude in [128, 256): exponent field f has 2^(f - 127) <= amax <
// 2^(f - 126), and 2^(134 - f) moves amax to [2^7, 2^8). Zero, Inf and NaN
// rows stay unscaled.
template <int ELEM>
__device__ __forceinline__ float load_q_row(const Params& p, long long row, bool valid, int lane, float (&v)[18]) {
  const u32* q = reinterpret_cast<const u32*>(static_cast<const u16*>(p.q) + row * kHeadDim);
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < 9; ++k) {
    unpack2<ELEM>(valid ? q[lane + 32 * k] : 0u, v[2 * k], v[2 * k + 1]);
    amax = fmaxf(amax, fmaxf(fabsf(v[2 * k]), fabsf(v[2 * k + 1])));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const int field = __float_as_int(amax) >> 23;
  const int exponent = 261 - field < 1 ? 1 : (261 - field > 254 ? 254 : 261 - field);
  return field == 0 || field == 255 ? 1.0f : __int_as_float(exponent << 23);
}
// V^T fragments of one 128-latent block of a 32-token step for fp8 P V.
// ldmatrix.trans over byte pairs gives thread (g, c4) latents 2 g, 2 g + 1
// of a 16-byte column at tokens 2 c4, 2 c4 + 1 (+ 8 j for matrix j); one
// byte permute per register then gathers a latent's four tokens. The A
// registers of m-block b hold latents vt_latent(b, warp, g) (rows g) and
// + 1 (rows g + 8), and positions 4 c4 .. 4 c4 + 3 are tokens 2 c4 +
// {0, 8, 1, 9} (16 + 4 c4 ..: 16 more), the order store_p_tile keeps.
// Against word loads and a byte transpose: 2 loads and 8 permutes for
// 8 LDS and 12.
__device__ __forceinline__ int vt_latent(int b, int warp, int g) { return 16 * (2 * warp + b) + 2 * g; }
// This lane's ldmatrix row address for m-block b: token row `lane` of the
// step, the 16-byte column of vt_latent's latents, swizzled as the tile's
// 128-byte rows (conflict-free: a phase's 8 rows hit 8 columns).
__device__ __forceinline__ void vt_lane_offsets(int warp, int lane, u32 (&off)[2]) {
#pragma unroll
  for (int b = 0; b < 2; ++b) off[b] = lane * 128 + (((2 * warp + b) ^ (lane & 7)) << 4);
}
__device__ __forceinline__ void load_vt_fragments(u32 row_base, const u32 (&off)[2], u32 (&f)[2][4]) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    u32 r[4];
    ldmatrix_x4_trans(r, row_base + off[b]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      f[b][2 * h] = byte_perm(r[2 * h], r[2 * h + 1], 0x6240);
      f[b][2 * h + 1] = byte_perm(r[2 * h], r[2 * h + 1], 0x7351);
    }
  }
}
// Two latents of row n's output from `latent` on: into out for a whole
// item, into the split's partial entry otherwise.
template <int ELEM>
__device__ __forceinline__ void store_out_pair(const Params& p, const WorkItem& w, long long row0, int n, int latent,
                                               float v0, float v1) {
  if (w.split < 0) {
    *reinterpret_cast<u32*>(static_cast<u16*>(p.out) + (row0 + n) * kLatent + latent) = pack2<ELEM>(v0, v1);
  } else {
    *reinterpret_cast<float2*>(p.partial_out + split_entry(w, n) * kLatent + latent) = make_float2(v0, v1);
  }
}

template <int PAGE, int ELEM>
__device__ __forceinline__ void decode_tile_fp8_steps(const Params& p) {
  typedef Fp8StepsLayout L;
  constexpr int T = L::kTileTokens;
  constexpr int R = L::kRows;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const u32 base = smem_addr(smem);
  const u32 bar0 = base + L::kBarrierOffset;
  float* factor_s = reinterpret_cast<float*>(smem + L::kRowInfoOffset);  // S's factor per row
  float* hand_s = factor_s + R;          // warpgroup 1's [reference max | l | true max] per row
  float* scratch_s = hand_s + 3 * R;     // [8 warps][16]

  const WorkItem w = p.items[blockIdx.x];
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int t = tid & 127, warp = t >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
  const int own_barrier = kFp8StepsBarrier0 + wg;
  const int rows_total = w.q_len * p.heads;
  const long long row0 = static_cast<long long>(w.token_offset) * p.heads + w.row_begin;
  const int n_tiles = w.kv_end > w.kv_begin ? (w.kv_end - w.kv_begin + T - 1) / T : 0;
  const int* page_row = p.page_table + static_cast<long long>(w.request) * p.page_table_stride;
  const unsigned char* pool = static_cast<const unsigned char*>(p.pool);

  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) mbarrier_init(bar0 + 8 * s, 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q' = Q q_scale in three e4m3 parts, a warp per row (load_q_row):
  // Q q_scale keeps Q's bits and the three parts (4 significant bits each)
  // hold bf16's 8 and fp16's 11 exactly down to e4m3's subnormals. Rows
  // past the request's last are zero.
  for (int r = tid >> 5; r < R; r += 8) {
    float v[18];
    const float q_scale = load_q_row<ELEM>(p, row0 + r, w.row_begin + r < rows_total, lane, v);
    if (lane == 0) factor_s[r] = p.scale_log2 / q_scale;
#pragma unroll
    for (int k = 0; k < 9; ++k) {
      const int c = 2 * lane + 64 * k;
      const float x = v[2 * k] * q_scale, y = v[2 * k + 1] * q_scale;
      const u16 hi = to_fp8x2<false>(x, y);
      float hx, hy;
      from_fp8x2<false>(hi, hx, hy);
      const u16 mid = to_fp8x2<false>(x - hx, y - hy);
      float mx, my;
      from_fp8x2<false>(mid, mx, my);
      const u16 lo = to_fp8x2<false>((x - hx) - mx, (y - hy) - my);
      auto at = [&](int row) {
        return c < kLatent ? (c / 128) * L::kQBlockBytes + swizzle128(row, c % 128)
                           : 4 * L::kQBlockBytes + swizzle64(row, c - kLatent);
      };
      *reinterpret_cast<u16*>(smem + L::kQOffset + at(r)) = hi;
      *reinterpret_cast<u16*>(smem + L::kQOffset + at(R + r)) = mid;
      *reinterpret_cast<u16*>(smem + L::kQOffset + at(2 * R + r)) = lo;
    }
  }
  fence_proxy_async();
  __syncthreads();

  // This thread's rows (S^T's and O^T's columns n = 8 j + 2 c4 + e at
  // index 2 j + e): their KV bounds and S's factors. Rows past the
  // request's last see the whole range (zero Q: finite S) and are never stored.
  int bound[4];
  float factor[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = 8 * (i / 2) + 2 * c4 + (i % 2);
    bound[i] = row_kv_bound(p, w, n, rows_total, w.kv_end);
    factor[i] = factor_s[n];
  }

  // Copies: warp w of the owning warpgroup takes rows 16 w .. 16 w + 15 of
  // a tile, lane l chunk l of a row's 512 latent bytes, and the rope four
  // lanes to a row (rows looked up as Fp8StepsRows says).
  const Fp8StepsRows<PAGE, T> rows(w, page_row, warp, lane);
  const int main_dst = (lane / 8) * L::kBlockBytes + 16 * warp * 128;
  const int rope_row = 16 * warp + (lane >> 2);
  const int rope_dst = L::kRopeOffset + swizzle64(rope_row, (lane & 3) * 16);
  auto load_tile = [&](int tile, int page) {
    unsigned char* dst = smem + L::kKvOffset + (tile % L::kStages) * L::kTileBytes;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int s = rows.slot(tile, page, k);
      const unsigned char* src = pool + static_cast<long long>(s < 0 ? 0 : s) * kHeadDim + lane * 16;
      cp_async_16(dst + main_dst + k * 128 + (((lane ^ k) & 7) << 4), src, s >= 0);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int s = rows.slot(tile, page, (lane >> 2) + 8 * h);
      const unsigned char* src = pool + static_cast<long long>(s < 0 ? 0 : s) * kHeadDim + kLatent + (lane & 3) * 16;
      cp_async_16(dst + rope_dst + h * 8 * 64, src, s >= 0);
    }
    cp_async_arrive(bar0 + 8 * (tile % L::kStages));
  };
  for (int tile = wg; tile < n_tiles && tile < L::kStages; tile += 2) load_tile(tile, rows.lookup(tile));

  float o[8][8];  // O^T m-block 2 q + b: latents 128 q + vt_latent(b, warp, g) (rows g) / + 1 (rows g + 8)
#pragma unroll
  for (int m = 0; m < 8; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i) o[m][i] = 0.0f;
  float m_ref[4], l_run[4], m_top[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m_ref[i] = neg_inf();
    l_run[i] = 0.0f;
    m_top[i] = neg_inf();
  }
  const u32 q_base = base + L::kQOffset;
  const u32 p_own = base + L::kPOffset + wg * L::kPBytes;
  u32 v_off[2];
  vt_lane_offsets(warp, lane, v_off);
  // P^T of S (already scaled) against the reference maxima as they stand;
  // a row that has seen nothing (-inf) subtracts 0.
  auto store_p = [&](const float (&s)[8], float (&l_tile)[4]) {
    float one[4], sub[4];
#pragma unroll
    for (int col = 0; col < 4; ++col) {
      one[col] = 1.0f;
      sub[col] = m_ref[col] == neg_inf() ? 0.0f : m_ref[col];
    }
    store_p_tile(p_own, s, one, sub, lane, warp, l_tile);
  };

  for (int tile = wg; tile < n_tiles; tile += 2) {
    const int refill = tile + L::kStages;
    const int refill_page = refill < n_tiles ? rows.lookup(refill) : -1;
    const u32 stage = base + L::kKvOffset + (tile % L::kStages) * L::kTileBytes;
    mbarrier_wait(bar0 + 8 * (tile % L::kStages), (tile / L::kStages) & 1);
    fence_proxy_async();
    // S in six chunks of three steps, each summed into float32 as it
    // lands: the fp8 wgmma accumulator keeps about 14 bits (DeepSeek-V3's
    // report), and its error grows with the steps a sum takes (all 18 left
    // the statistics' maximum 5-8e-4 off). Two accumulator sets alternate:
    // one chunk runs while the other's is folded. Columns: Q's high, middle
    // and low parts of the 16 rows.
    float s_acc[2][24];
    float s_sum[8];
    const SStepDescs<L> descs(stage, q_base, q_base + 4 * L::kQBlockBytes);
    auto issue_chunk = [&](int chunk) {
      wgmma_fence();
#pragma unroll
      for (int k3 = 0; k3 < 3; ++k3) {
        const u64 a = descs.k(3 * chunk + k3), b = descs.q(3 * chunk + k3);
        wgmma_m64n48k32_e4m3_ss(s_acc[chunk & 1], a, b, k3 > 0);
      }
      wgmma_commit();
    };
    auto fold = [&](int set, bool first) {
      pin_registers(s_acc[set]);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float part = (s_acc[set][i] + s_acc[set][8 + i]) + s_acc[set][16 + i];
        s_sum[i] = first ? part : s_sum[i] + part;
      }
    };
    issue_chunk(0);
    issue_chunk(1);
#pragma unroll
    for (int chunk = 2; chunk < 6; ++chunk) {
      wgmma_wait<1>();  // chunk - 2, in the set chunk reuses, is done
      fold(chunk & 1, chunk == 2);
      issue_chunk(chunk);
    }
    wgmma_wait<1>();
    fold(0, false);
    wgmma_wait<0>();
    fold(1, false);
    // s[4 j + 2 h + e]: token 16 warp + g + 8 h, row 8 j + 2 c4 + e.
    float s[8];
    bool over = false;
    const int pos0 = w.kv_begin + tile * T + 16 * warp + g;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int col = 2 * (i / 4) + (i & 1);
      const int pos = pos0 + 8 * ((i >> 1) & 1);
      s[i] = pos < bound[col] ? s_sum[i] * factor[col] : neg_inf();
      m_top[col] = fmaxf(m_top[col], s[i]);
      over |= passes_reference(m_ref[col], s[i]);
    }
    // P^T against the reference maxima as they stand; the barrier that
    // orders it before P V also says whether any row passed its maximum,
    // and only then (the first tiles, rarely after) do the maxima move
    // and P^T go out again: one warpgroup barrier a tile instead of two.
    float l_tile[4];
    store_p(s, l_tile);
    if (barrier_any<128>(own_barrier, over)) {
      // The warpgroup's maxima per row: lanes, then its four warps.
      auto thread_max = [&](int col) { return fmaxf(s[4 * (col / 2) + (col & 1)], s[4 * (col / 2) + 2 + (col & 1)]); };
      move_references<R, 4>(thread_max, scratch_s, 4 * wg + warp, 4 * wg, own_barrier, g, c4, m_ref, l_run, o);
      store_p(s, l_tile);
      named_barrier_sync(own_barrier, 128);  // P^T again; scratch is read before anyone's next write
    }
#pragma unroll
    for (int col = 0; col < 4; ++col) l_run[col] += l_tile[col];

    // P V over the tile's two 32-token steps: V^T fragments of the four
    // 128-latent blocks (load_vt_fragments).
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      u32 f[4][2][4];  // [block q][m-block b][register]
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        load_vt_fragments(stage + q * L::kBlockBytes + 32 * kk * 128, v_off, f[q]);
      }
      wgmma_fence();
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          wgmma_m64n16k32_fp8_rs<true>(o[2 * q + b], f[q][b], smem_desc_sw128(p_own + 32 * kk));
          wgmma_m64n16k32_fp8_rs<false>(o[2 * q + b], f[q][b], smem_desc_sw128(p_own + 64 + 32 * kk));
        }
      wgmma_commit();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < 8; ++m) pin_registers(o[m]);
    // Every warp of the warpgroup is done with the stage: refill it.
    named_barrier_sync(own_barrier, 128);
    if (refill < n_tiles) load_tile(refill, refill_page);
  }

  // l and the true maximum per row over the warpgroup: lanes, then warps.
#pragma unroll
  for (int col = 0; col < 4; ++col) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      l_run[col] += __shfl_xor_sync(0xffffffffu, l_run[col], off);
      m_top[col] = fmaxf(m_top[col], __shfl_xor_sync(0xffffffffu, m_top[col], off));
    }
  }
  named_barrier_sync(own_barrier, 128);
  if (g == 0) {
#pragma unroll
    for (int col = 0; col < 4; ++col) {
      const int n = 8 * (col / 2) + 2 * c4 + (col & 1);
      scratch_s[(4 * wg + warp) * R + n] = l_run[col];
    }
  }
  named_barrier_sync(own_barrier, 128);
#pragma unroll
  for (int col = 0; col < 4; ++col) {
    const int n = 8 * (col / 2) + 2 * c4 + (col & 1);
    float l = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) l += scratch_s[(4 * wg + k) * R + n];
    l_run[col] = l;
  }
  // Every thread of a warpgroup holds the same true maximum of its rows
  // only after the warps meet too: through the hand-over below for
  // warpgroup 1, through scratch for both.
  named_barrier_sync(own_barrier, 128);
  if (g == 0) {
#pragma unroll
    for (int col = 0; col < 4; ++col) scratch_s[(4 * wg + warp) * R + 8 * (col / 2) + 2 * c4 + (col & 1)] = m_top[col];
  }
  named_barrier_sync(own_barrier, 128);
#pragma unroll
  for (int col = 0; col < 4; ++col) {
    const int n = 8 * (col / 2) + 2 * c4 + (col & 1);
#pragma unroll
    for (int k = 0; k < 4; ++k) m_top[col] = fmaxf(m_top[col], scratch_s[(4 * wg + k) * R + n]);
  }

  // Warpgroup 1 hands O^T and its row state over through its own stages
  // (1 and 3: every copy into them was waited for, every read is done).
  float* hand_o = reinterpret_cast<float*>(smem + L::kKvOffset + L::kTileBytes);
  if (wg == 1) {
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
      for (int i = 0; i < 8; ++i) hand_o[(m * 8 + i) * 128 + t] = o[m][i];
    if (warp == 0 && g == 0) {
#pragma unroll
      for (int col = 0; col < 4; ++col) {
        const int n = 8 * (col / 2) + 2 * c4 + (col & 1);
        hand_s[n] = m_ref[col];
        hand_s[R + n] = l_run[col];
        hand_s[2 * R + n] = m_top[col];
      }
    }
  }
  __syncthreads();
  if (wg == 1) return;
  float a0[4], a1[4], inv[4];
#pragma unroll
  for (int col = 0; col < 4; ++col) {
    const int n = 8 * (col / 2) + 2 * c4 + (col & 1);
    const float m1 = hand_s[n];
    const float ref = fmaxf(m_ref[col], m1);
    a0[col] = m_ref[col] == neg_inf() ? 0.0f : fast_exp2(m_ref[col] - ref);
    a1[col] = m1 == neg_inf() ? 0.0f : fast_exp2(m1 - ref);
    const float l_ref = l_run[col] * a0[col] + hand_s[R + n] * a1[col];
    inv[col] = l_ref > 0.0f ? p.out_scale / l_ref : 0.0f;
    const float top = fmaxf(m_top[col], hand_s[2 * R + n]);
    if (warp == 0 && g == 0 && w.row_begin + n < rows_total) {
      // o is normalised against the reference maximum; the stats take the
      // true one, with l moved to it.
      const float l = l_ref > 0.0f ? l_ref * fast_exp2(ref - top) : 0.0f;
      const float m = l_ref > 0.0f ? top * 0.6931471805599453f : neg_inf();
      store_row_stats(p, w, row0, n, m, l);
    }
  }
#pragma unroll
  for (int col = 0; col < 4; ++col) {
    const int n = 8 * (col / 2) + 2 * c4 + (col & 1);
    if (w.row_begin + n >= rows_total) continue;
    const int i0 = 4 * (col / 2) + (col & 1);
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      float v[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = i0 + 2 * k;
        v[k] = (o[m][i] * a0[col] + hand_o[(m * 8 + i) * 128 + t] * a1[col]) * inv[col];
      }
      store_out_pair<ELEM>(p, w, row0, n, 128 * (m / 2) + vt_latent(m % 2, warp, g), v[0], v[1]);
    }
  }
}

// Steps of S's high part summed in the fp8 accumulator before each float32
// sum (an A/B knob: 3, 6, 9 or 18). With the low part issued a pair ahead
// the low part's accumulator is live across the softmax: 3 spilled 96-112
// bytes and ran case 10 in 309 us, 6 has no spills and ran 273 us (the
// build before the low part went ahead: 285.5), 9 ran as 6 did, 18
// spills 8 bytes.
#ifndef HELIXMLA_TC_FP8_STEPS_48_CHUNK_STEPS
#define HELIXMLA_TC_FP8_STEPS_48_CHUNK_STEPS 6
#endif
// 48-row tiles of fp8 KV (33-48 rows: suite case 10's 48 heads) on fp8
// matrix steps, tokens as M and rows as N as in decode_tile_fp8_steps, but
// O^T of 48 rows over all 512 latents would take 192 registers a thread,
// so the warpgroups split the latents instead of the tiles (the prototype
// bench/prototypes/swapped_fp8_native.cu, session 28: case 10's shape in
// 255 us against 358 on the producer build; this engine 292, session 30).
// Tiles go in pairs: warpgroup w computes S^T of tile 2 i + w and writes
// its P^T; the block agrees on one reference maximum per row; then each
// warpgroup multiplies both tiles' P^T into O^T of its 256 latents. Each
// warpgroup copies the columns its P V reads into every stage, and half
// the rope, so a stage's mbarrier counts the whole block.
//
// S = Q K^T is split by Q's two e4m3 parts: the low part's 18 steps for
// the next pair are issued right after this pair's row maxima, so the
// tensor cores work through the softmax, the P^T stores and the refill
// (the overlap of FlashAttention-3's intra-warpgroup pipelining); the high
// part follows once the stage is needed, and its first wait also retires
// the low part and the previous pair's P V.
//
// Accuracy as in the 16-row engine: Q' = Q q_scale with q_scale a power of
// two, here in two e4m3 parts (bf16's 8 significant bits exactly, fp16's
// 11 to 8), S's high part summed in float32 every few steps, P^T's high
// part in e5m2 and the rest in e4m3. A row's S factor and KV bound stay
// in shared memory (12 rows a thread: registers hold O^T, S and the
// row's maxima and l); tiles before the first bound skip the masking.
template <int PAGE, int ELEM>
__device__ __forceinline__ void decode_tile_fp8_steps_split_latents(const Params& p) {
  typedef Fp8StepsSplitLatentsLayout L;
  constexpr int T = L::kTileTokens;
  constexpr int R = L::kRows;
  constexpr int kCols = R / 4;   // this thread's rows n = 8 (c / 2) + 2 c4 + (c & 1), c < kCols
  constexpr int kAcc = R / 2;    // registers of an m64n48 accumulator
  constexpr int kChunkSteps = HELIXMLA_TC_FP8_STEPS_48_CHUNK_STEPS;
  constexpr int kSteps = kHeadDim / 32;
  static_assert(kSteps % kChunkSteps == 0, "S's chunks cover its steps");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const u32 base = smem_addr(smem);
  const u32 bar0 = base + L::kBarrierOffset;
  float* factor_s = reinterpret_cast<float*>(smem + L::kRowInfoOffset);
  int* bound_s = reinterpret_cast<int*>(factor_s + R);
  float* scratch_s = reinterpret_cast<float*>(bound_s + R);  // [8 warps][R]

  const WorkItem w = p.items[blockIdx.x];
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int t = tid & 127, warp = t >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
  const int block_warp = tid >> 5;
  const int own_barrier = kFp8StepsBlockBarrier + 1 + wg;
  const int rows_total = w.q_len * p.heads;
  const long long row0 = static_cast<long long>(w.token_offset) * p.heads + w.row_begin;
  // Whole pairs: an odd count's last tile has a partner past the range,
  // copied as zeros and masked, so the loop never branches between the
  // pair's matrix steps (a branch there made ptxas serialise every wgmma).
  const int n_tiles = w.kv_end > w.kv_begin ? 2 * ((w.kv_end - w.kv_begin + 2 * T - 1) / (2 * T)) : 0;
  const int* page_row = p.page_table + static_cast<long long>(w.request) * p.page_table_stride;
  const unsigned char* pool = static_cast<const unsigned char*>(p.pool);

  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) mbarrier_init(bar0 + 8 * s, kThreads);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q' in two parts, a warp per row (load_q_row).
  for (int r = block_warp; r < R; r += 8) {
    float v[18];
    const float q_scale = load_q_row<ELEM>(p, row0 + r, w.row_begin + r < rows_total, lane, v);
    if (lane == 0) {
      factor_s[r] = p.scale_log2 / q_scale;
      bound_s[r] = row_kv_bound(p, w, r, rows_total, w.kv_end);
    }
#pragma unroll
    for (int k = 0; k < 9; ++k) {
      const int c = 2 * lane + 64 * k;
      const float x = v[2 * k] * q_scale, y = v[2 * k + 1] * q_scale;
      const u16 hi = to_fp8x2<false>(x, y);
      float hx, hy;
      from_fp8x2<false>(hi, hx, hy);
      const u16 lo = to_fp8x2<false>(x - hx, y - hy);
      auto at = [&](int row) {
        return c < kLatent ? (c / 128) * L::kQBlockBytes + swizzle128(row, c % 128)
                           : 4 * L::kQBlockBytes + swizzle64(row, c - kLatent);
      };
      *reinterpret_cast<u16*>(smem + L::kQOffset + at(r)) = hi;
      *reinterpret_cast<u16*>(smem + L::kQOffset + at(R + r)) = lo;
    }
  }
  fence_proxy_async();
  __syncthreads();
  // The first position any row's bound cuts: tiles before it need no mask.
  int mask_from = bound_s[lane];
  if (lane + 32 < R) mask_from = min(mask_from, bound_s[lane + 32]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mask_from = min(mask_from, __shfl_xor_sync(0xffffffffu, mask_from, o));

  // Copies: warpgroup w takes latent bytes [256 w, 256 w + 256) of every
  // row and the rope of half of them, so that both have the same work
  // before the barrier they meet at. Its warp v takes rows 16 v .. 16 v +
  // 15, two rows an instruction, 16 lanes a row, and the rope of rows
  // 16 v + 8 w .. + 7, four lanes a row (rows looked up as Fp8StepsRows says).
  const Fp8StepsRows<PAGE, T> rows(w, page_row, warp, lane);
  const int half = lane >> 4, chunk = 16 * wg + (lane & 15);
  const int main_dst = (chunk / 8) * L::kBlockBytes + (16 * warp + half) * 128;
  const int rope_row = 8 * wg + (lane >> 2);  // of the warp's 16
  const int rope_dst = L::kRopeOffset + swizzle64(16 * warp + rope_row, (lane & 3) * 16);
  auto load_tile = [&](int tile, int page) {
    unsigned char* dst = smem + L::kKvOffset + (tile % L::kStages) * L::kTileBytes;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int row = 2 * k + half;
      const int s = rows.slot(tile, page, row);
      const unsigned char* src = pool + static_cast<long long>(s < 0 ? 0 : s) * kHeadDim + chunk * 16;
      cp_async_16(dst + main_dst + 2 * k * 128 + (((chunk ^ row) & 7) << 4), src, s >= 0);
    }
    const int s = rows.slot(tile, page, rope_row);
    const unsigned char* src = pool + static_cast<long long>(s < 0 ? 0 : s) * kHeadDim + kLatent + (lane & 3) * 16;
    cp_async_16(dst + rope_dst, src, s >= 0);
    cp_async_arrive(bar0 + 8 * (tile % L::kStages));
  };
  for (int tile = 0; tile < n_tiles && tile < L::kStages; ++tile) load_tile(tile, rows.lookup(tile));

  float o[4][kAcc];  // O^T m-block 2 q + b: latents 256 wg + 128 q + vt_latent(b, warp, g) (rows g) / + 1 (rows g + 8)
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) o[m][i] = 0.0f;
  // A row that has seen nothing holds the lowest finite reference, not
  // -inf: P = 2^(s factor - m_ref) then needs no select. Any finite score
  // passes it, and P^T stored against it is stored again.
  float m_ref[kCols], l_run[kCols], m_top[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    m_ref[c] = lowest_finite();
    l_run[c] = 0.0f;
    m_top[c] = neg_inf();
  }
  const u32 q_base = base + L::kQOffset;
  u32 v_off[2];
  vt_lane_offsets(warp, lane, v_off);

  // S's steps [first, first + count) of Q's part `part` over the tile in
  // `stage`, into acc (the first step overwrites it), as one group.
  auto s_steps = [&](u32 stage, float (&acc)[kAcc], int first, int count, int part) {
    const u32 q = launder(q_base);  // descriptors built here, not held across the loop
    const SStepDescs<L> descs(stage, q + part * R * 128, q + 4 * L::kQBlockBytes + part * R * 64);
    wgmma_fence();
#pragma unroll
    for (int k3 = 0; k3 < count; ++k3) {
      const u64 a = descs.k(first + k3), b = descs.q(first + k3);
      if (k3 == 0) {
        wgmma_m64n48k32_e4m3_ss<false>(acc, a, b);
      } else {
        wgmma_m64n48k32_e4m3_ss<true>(acc, a, b);
      }
    }
    wgmma_commit();
  };
  // Q's low part of this warpgroup's next tile in one chain of steps (its
  // terms are 2^-4 of the high part's, and the fp8 accumulator's precision
  // costs little there), issued a pair ahead: the tensor cores run it
  // through this pair's softmax, P^T stores and refill, where they idled.
  // A tile past the range gets the steps too, over whatever its stage
  // holds, so that no branch sits between matrix steps; its sums are
  // never read.
  float acc_low[kAcc];
  auto issue_low_part = [&](int tile) {
    if (tile < n_tiles) mbarrier_wait(bar0 + 8 * (tile % L::kStages), (tile / L::kStages) & 1);
    fence_proxy_async();
    s_steps(base + L::kKvOffset + (tile % L::kStages) * L::kTileBytes, acc_low, 0, kSteps, 1);
  };
#pragma unroll
  for (int m = 0; m < 4; ++m) pin_registers(o[m]);
  issue_low_part(wg);

  for (int pair = 0; 2 * pair < n_tiles; ++pair) {
    const int own = 2 * pair + wg;
    const int refill = 2 * pair + L::kStages;  // refill and refill + 1 go into this pair's stages
    int refill_page[2];
#pragma unroll
    for (int tp = 0; tp < 2; ++tp) refill_page[tp] = refill + tp < n_tiles ? rows.lookup(refill + tp) : -1;
    // s[4 j + 2 h + e]: token 16 warp + g + 8 h, row 8 j + 2 c4 + e,
    // unscaled (the factor is positive: the maxima scale after, P in its FMA).
    float s[kAcc];
    // S's factor per row of this thread's rows, read once a pair: held
    // across the loop it would cost kCols registers O^T needs.
    float factor[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) factor[c] = factor_s[8 * (c / 2) + 2 * c4 + (c & 1)];
    bool over = false;
    {
      // Q's high part in chunks of kChunkSteps, each summed into float32,
      // one m64n48 accumulator at a time (O^T holds 96 registers a
      // thread). The first chunk's wait also ends the low part and the
      // previous pair's P V.
      const u32 stage = base + L::kKvOffset + (own % L::kStages) * L::kTileBytes;
      float acc[kAcc];
#pragma unroll
      for (int chunk_i = 0; chunk_i < kSteps / kChunkSteps; ++chunk_i) {
        s_steps(stage, acc, kChunkSteps * chunk_i, kChunkSteps, 0);
        wgmma_wait<0>();
        pin_registers(acc);
        if (chunk_i == 0) {
          pin_registers(acc_low);
#pragma unroll
          for (int m = 0; m < 4; ++m) pin_registers(o[m]);
#pragma unroll
          for (int i = 0; i < kAcc; ++i) s[i] = acc_low[i] + acc[i];
        } else {
#pragma unroll
          for (int i = 0; i < kAcc; ++i) s[i] += acc[i];
        }
      }
      const int tile_pos = w.kv_begin + own * T;
      const int pos0 = tile_pos + 16 * warp + g;
      const bool masked = tile_pos + T > mask_from;
      if (masked) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) {
          if (pos0 + 8 * ((i >> 1) & 1) >= bound_s[8 * (i / 4) + 2 * c4 + (i & 1)]) s[i] = neg_inf();
        }
      }
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int i = 4 * (c / 2) + (c & 1);
        const float mx = fmaxf(s[i], s[i + 2]) * factor[c];
        m_top[c] = fmaxf(m_top[c], mx);
        over |= passes_reference(m_ref[c], mx);
      }
    }
    issue_low_part(own + 2);
    // P^T of this warpgroup's tile against the reference maxima as they
    // stand. The barrier that hands it to the other warpgroup also says
    // whether any row passed its maximum, and only then (the first pairs,
    // rarely after) does the block agree on new maxima, rescale and store
    // P^T again: one block barrier a pair instead of two.
    const u32 p_own = base + L::kPOffset + ((pair & 1) * 2 + wg) * L::kPBytes;
    float l_pair[kCols];
    store_p_tile(p_own, s, factor, m_ref, lane, warp, l_pair);
    if (barrier_any<kThreads>(kFp8StepsBlockBarrier, over)) {
      // The block's maxima per row of the pair: lanes, then all eight warps.
      auto thread_max = [&](int c) {
        return fmaxf(s[4 * (c / 2) + (c & 1)], s[4 * (c / 2) + 2 + (c & 1)]) * factor[c];
      };
      move_references<R, 8>(thread_max, scratch_s, block_warp, 0, kFp8StepsBlockBarrier, g, c4, m_ref, l_run, o);
      store_p_tile(p_own, s, factor, m_ref, lane, warp, l_pair);
      named_barrier_sync(kFp8StepsBlockBarrier, kThreads);  // P^T again; scratch is read before anyone's next write
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) l_run[c] += l_pair[c];

    // P V of both tiles into this warpgroup's latents: V^T fragments of its
    // two 128-latent blocks, built as in decode_tile_fp8_steps.
#pragma unroll
    for (int tp = 0; tp < 2; ++tp) {
      const int tile = 2 * pair + tp;
      if (tp != wg) mbarrier_wait(bar0 + 8 * (tile % L::kStages), (tile / L::kStages) & 1);
      const u32 stage = base + L::kKvOffset + (tile % L::kStages) * L::kTileBytes;
      const u32 p_tile = base + L::kPOffset + ((pair & 1) * 2 + tp) * L::kPBytes;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        // Two groups' fragments in flight at most: this one's registers are
        // the ones the group before last read.
        if (2 * tp + kk >= 2) wgmma_wait<1>();
        u32 f[2][2][4];  // [block q][m-block b][register]
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          load_vt_fragments(stage + (2 * wg + q) * L::kBlockBytes + 32 * kk * 128, v_off, f[q]);
        }
        wgmma_fence();
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            wgmma_m64n48k32_fp8_rs<true>(o[2 * q + b], f[q][b], smem_desc_sw128(p_tile + 32 * kk));
            wgmma_m64n48k32_fp8_rs<false>(o[2 * q + b], f[q][b], smem_desc_sw128(p_tile + 64 + 32 * kk));
          }
        wgmma_commit();
      }
      // S of both tiles was done before the block barrier above, and P V
      // reads a stage only through the fragments, which this warpgroup
      // has all loaded once it passes its own barrier: its columns of the
      // tile's stage are free while P V still runs, and the first tile's
      // refill fills the wait for its groups.
      named_barrier_sync(own_barrier, 128);
      if (refill + tp < n_tiles) load_tile(refill + tp, refill_page[tp]);
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < 4; ++m) pin_registers(o[m]);

  // l and the true maximum per row over the block: lanes, then all eight warps.
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      l_run[c] += __shfl_xor_sync(0xffffffffu, l_run[c], off);
      m_top[c] = fmaxf(m_top[c], __shfl_xor_sync(0xffffffffu, m_top[c], off));
    }
  }
  named_barrier_sync(kFp8StepsBlockBarrier, kThreads);
  if (g == 0) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) scratch_s[block_warp * R + 8 * (c / 2) + 2 * c4 + (c & 1)] = l_run[c];
  }
  named_barrier_sync(kFp8StepsBlockBarrier, kThreads);
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int n = 8 * (c / 2) + 2 * c4 + (c & 1);
    float l = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) l += scratch_s[k * R + n];
    l_run[c] = l;
  }
  named_barrier_sync(kFp8StepsBlockBarrier, kThreads);
  if (g == 0) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) scratch_s[block_warp * R + 8 * (c / 2) + 2 * c4 + (c & 1)] = m_top[c];
  }
  named_barrier_sync(kFp8StepsBlockBarrier, kThreads);
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int n = 8 * (c / 2) + 2 * c4 + (c & 1);
    float top = neg_inf();
#pragma unroll
    for (int k = 0; k < 8; ++k) top = fmaxf(top, scratch_s[k * R + n]);
    if (w.row_begin + n >= rows_total) continue;
    const float l_ref = l_run[c];
    const float inv = l_ref > 0.0f ? p.out_scale / l_ref : 0.0f;
    if (wg == 0 && warp == 0 && g == 0) {
      // o is normalised against the reference maximum; the stats take the
      // true one, with l moved to it.
      const float l = l_ref > 0.0f ? l_ref * fast_exp2(m_ref[c] - top) : 0.0f;
      const float m = l_ref > 0.0f ? top * 0.6931471805599453f : neg_inf();
      store_row_stats(p, w, row0, n, m, l);
    }
    const int i0 = 4 * (c / 2) + (c & 1);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int latent = 256 * wg + 128 * (m / 2) + vt_latent(m % 2, warp, g);
      store_out_pair<ELEM>(p, w, row0, n, latent, o[m][i0] * inv, o[m][i0 + 2] * inv);
    }
  }
}

// A work item on the engine ENGINE names.
// `kv_map`: the pool's tensor map, read by the seesaw engine's one-page-per-tile build.
template <int M, int PAGE, int ELEM, int KV, int ENGINE, int BLOCKS = 0>
__device__ __forceinline__ void decode_item(const Params& p, const KvTensorMap* kv_map) {
  if constexpr (ENGINE == kEngineSeesaw) {
    if constexpr (PAGE % SeesawLayout::kTileTokens == 0) {
      if (p.items[blockIdx.x].kv_begin % SeesawLayout::kTileTokens == 0) {
        decode_tile_seesaw<PAGE, ELEM, true>(p, kv_map);
        return;
      }
    }
    decode_tile_seesaw<PAGE, ELEM, false>(p, kv_map);
  } else if constexpr (ENGINE == kEngineFp8Steps && M == 16) {
    decode_tile_fp8_steps<PAGE, ELEM>(p);
  } else if constexpr (ENGINE == kEngineFp8Steps) {
    decode_tile_fp8_steps_split_latents<PAGE, ELEM>(p);
  } else {
    decode_tile<M, PAGE, ELEM, KV, ENGINE, BLOCKS>(p);
  }
}

template <int M, int PAGE, int ELEM, int KV, int ENGINE, int BLOCKS = 0>
__global__ void __launch_bounds__(Config<M, KV, ENGINE, BLOCKS>::kBlockThreads, Config<M, KV, ENGINE, BLOCKS>::kBlocksPerSm)
    mla_decode_kernel(Params p, const __grid_constant__ KvTensorMap kv_map) {
  decode_item<M, PAGE, ELEM, KV, ENGINE, BLOCKS>(p, &kv_map);
}

#endif  // __CUDACC__

}  // namespace helixmla_tc

// Per-(M, KV kind, engine, build) sizes, stages and shared-memory map.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
#pragma once

#include "cuda/tensorcore/knobs.cuh"
#include "cuda/tensorcore/layouts.cuh"
#include "cuda/tensorcore/params.cuh"

namespace helixmla_tc {

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
  // The seesaw engine keeps its own map (SeesawLayout, layouts.cuh); the rest of this
  // Config describes the other engines.
  static constexpr bool kSeesaw = ENGINE == kEngineSeesaw;
  static_assert(!kSeesaw || (M == 64 && KV == kKvSameAsQ && BLOCKS == 0), "the seesaw engine runs 64-row 16-bit KV");
  // The fp8-steps engine keeps its own maps too (Fp8StepsLayout and
  // Fp8StepsSplitLatentsLayout, layouts.cuh).
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
  // fourth 16-bit KV stage (a fifth would fit, see
  // HELIXMLA_TC_WGMMA_16BIT_STAGES in knobs.cuh) and for fp8's
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

}  // namespace helixmla_tc

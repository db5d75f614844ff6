// Shared-memory maps of the engines that keep their own (seesaw, fp8-steps).
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
#pragma once

#include "cuda/tensorcore/params.cuh"

namespace helixmla_tc {

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

}  // namespace helixmla_tc

// Tensor-core MLA decode kernel (DESIGN §2): the design, decode_item and
// the kernel entry. The kernel is compiled twice from the same text: by
// nvcc for the precompiled page sizes, and, embedded as a string, by NVRTC
// for every other page size. It therefore uses only builtin types and
// inline PTX, and its parts under cuda/tensorcore/ include nothing but each
// other (the build inlines them into the one text NVRTC compiles:
// src/cuda/CMakeLists.txt). The host side includes this file for the
// parameter block the host fills (params.cuh) and the per-build sizes
// (config.cuh, with knobs.cuh and layouts.cuh).
//
// The parts: knobs.cuh (A/B macros; the 48-row fp8-steps engine keeps its
// own), params.cuh (what host and kernel share), layouts.cuh and
// config.cuh (shared-memory maps and per-build sizes); device code in
// primitives.cuh, wgmma_16bit.cuh, wgmma_fp8.cuh, item_rows.cuh,
// fp8_steps_common.cuh and one file per engine function: decode_tile.cuh
// (mma.sync and wgmma), decode_tile_seesaw.cuh, decode_tile_fp8_steps.cuh
// (16-row fp8) and decode_tile_fp8_steps_split_latents.cuh (48-row fp8).
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
//   batches, the two-block build of 32-row fp8, Config's BLOCKS in
//   config.cuh).
// - KV tiles of 32 tokens are gathered from the page pool with 16-byte
//   cp.async (page size PAGE is a template parameter: the page lookup is a
//   multiply, not a division), 2 to 4 stages deep; tokens past the range
//   are zero-filled, so masked positions multiply finite zeros. Each thread looks
//   up its page one tile ahead, so the page-table load never stalls a copy.
// - Shared-memory rows are 128-byte blocks with the 16-byte chunks XOR-swizzled
//   by row, so every ldmatrix and every cp.async store is conflict-free.
// - Four matrix engines (template ENGINE), float32 accumulate. The seesaw
//   engine (64-row tiles of 16-bit KV, FlashMLA's layout) and the fp8-steps
//   engine (16- and 48-row tiles of fp8 KV on e4m3 matrix steps) are their
//   own functions, described in their files; decode_tile runs the other two,
//   bf16 or fp16 in:
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

#include "cuda/tensorcore/config.cuh"
#include "cuda/tensorcore/params.cuh"

#if defined(__CUDACC__)

#include "cuda/tensorcore/decode_tile.cuh"
#include "cuda/tensorcore/decode_tile_fp8_steps.cuh"
#include "cuda/tensorcore/decode_tile_fp8_steps_split_latents.cuh"
#include "cuda/tensorcore/decode_tile_seesaw.cuh"

namespace helixmla_tc {

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

}  // namespace helixmla_tc

#endif  // __CUDACC__

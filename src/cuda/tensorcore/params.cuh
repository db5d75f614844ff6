// What the host and the kernel share: element, KV and engine kinds, the
// block's fixed sizes, the producer build's named barriers and register
// split, a work item, the parameter block, the tensor map.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
#pragma once

namespace helixmla_tc {

// Element kinds of the matrix inputs: Q (and out) type, and KV storage.
enum ElemKind { kElemBf16 = 0, kElemFp16 = 1 };
enum KvKind { kKvSameAsQ = 0, kKvFp8 = 1 };
// kEngineSeesaw: wgmma in FlashMLA's layout (decode_tile_seesaw.cuh),
// 64-row tiles of 16-bit KV. kEngineFp8Steps: wgmma with e4m3 operands,
// tokens as M, 16-row tiles of fp8 KV (decode_tile_fp8_steps.cuh) and
// 48-row ones (decode_tile_fp8_steps_split_latents.cuh).
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

}  // namespace helixmla_tc

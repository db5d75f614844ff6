// The mma.sync and wgmma engines (decode_tile).
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/config.cuh"
#include "cuda/tensorcore/item_rows.cuh"
#include "cuda/tensorcore/primitives.cuh"
#include "cuda/tensorcore/wgmma_16bit.cuh"

namespace helixmla_tc {

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
    const float inv = saw_keys(l) ? p.out_scale / l : 0.0f;
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
    const float l = saw_keys(l_ref) ? l_ref * exp2f(m_s[tid] - top_s[tid]) : 0.0f;
    const float m = saw_keys(l_ref) ? top_s[tid] * 0.6931471805599453f : neg_inf();
    store_row_stats(p, w, row0, tid, m, l);
  }
}

}  // namespace helixmla_tc

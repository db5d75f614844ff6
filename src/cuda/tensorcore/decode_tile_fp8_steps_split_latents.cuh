// The fp8-steps engine for 48-row tiles
// (decode_tile_fp8_steps_split_latents).
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/fp8_steps_common.cuh"
#include "cuda/tensorcore/item_rows.cuh"
#include "cuda/tensorcore/layouts.cuh"
#include "cuda/tensorcore/primitives.cuh"
#include "cuda/tensorcore/wgmma_fp8.cuh"

namespace helixmla_tc {

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
    const float inv = saw_keys(l_ref) ? p.out_scale / l_ref : 0.0f;
    if (wg == 0 && warp == 0 && g == 0) {
      // o is normalised against the reference maximum; the stats take the
      // true one, with l moved to it.
      const float l = saw_keys(l_ref) ? l_ref * fast_exp2(m_ref[c] - top) : 0.0f;
      const float m = saw_keys(l_ref) ? top * 0.6931471805599453f : neg_inf();
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

}  // namespace helixmla_tc

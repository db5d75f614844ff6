// The fp8-steps engine for 16-row tiles (decode_tile_fp8_steps).
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
    inv[col] = saw_keys(l_ref) ? p.out_scale / l_ref : 0.0f;
    const float top = fmaxf(m_top[col], hand_s[2 * R + n]);
    if (warp == 0 && g == 0 && w.row_begin + n < rows_total) {
      // o is normalised against the reference maximum; the stats take the
      // true one, with l moved to it.
      const float l = saw_keys(l_ref) ? l_ref * fast_exp2(ref - top) : 0.0f;
      const float m = saw_keys(l_ref) ? top * 0.6931471805599453f : neg_inf();
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

}  // namespace helixmla_tc

// The seesaw engine (decode_tile_seesaw): 64-row tiles of 16-bit KV.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/item_rows.cuh"
#include "cuda/tensorcore/layouts.cuh"
#include "cuda/tensorcore/primitives.cuh"
#include "cuda/tensorcore/wgmma_16bit.cuh"

namespace helixmla_tc {

// The seesaw engine: 64-row tiles of 16-bit KV in FlashMLA's layout
// (bench/prototypes/seesaw_wgmma.cu measured it first). The wgmma engine
// (decode_tile.cuh) splits each 32-token tile's S between its warpgroups by the
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
// Arrivals each phase of a part's mbarriers expects: one per thread of the
// warpgroup that refills the part (a TMA box's issuer arrives for all).
constexpr int kSeesawCopyArrivals = 128;

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
    for (int i = 0; i < 2 * L::kBlocks; ++i) mbarrier_init(bar0 + 8 * i, kSeesawCopyArrivals);
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
            mbarrier_arrive_expect_tx(bar(buf, k), L::kBlockBytes, kSeesawCopyArrivals);
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
    for (int k = first; k < last; ++k) cp_async_arrive(bar(buf, k));
    if (extra >= 0) cp_async_arrive(bar(buf, extra));
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
    const float inv = saw_keys(l) ? p.out_scale / l : 0.0f;
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
    const float m = saw_keys(l) ? m_s[tid] * 0.6931471805599453f : neg_inf();
    store_row_stats(p, w, row0, tid, m, l);
  }
}

}  // namespace helixmla_tc

// What the two fp8-steps engines share: byte swizzles and descriptors,
// fp8 conversions, barriers with a vote, row lookups, P's parts and
// stores, the reference moves, S's descriptors, Q's loads, V^T's
// fragments and the output stores.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/item_rows.cuh"
#include "cuda/tensorcore/primitives.cuh"

namespace helixmla_tc {

// Byte c of row r in a 128-byte-swizzled block, and in a 64-byte-swizzled
// one. swizzle128 is swizzled's pattern at byte grain, written out: built
// on swizzled, the 16-row fp8-steps engine's kernels took ~50 more
// instructions (session 29).
__device__ __forceinline__ int swizzle128(int r, int c) { return r * 128 + ((((c >> 4) ^ r) & 7) << 4) + (c & 15); }
__device__ __forceinline__ int swizzle64(int r, int c) { return r * 64 + ((((c >> 4) ^ (r >> 1)) & 3) << 4) + (c & 15); }
// K-major descriptors of the fp8-steps engines' operands: 8-row strides of 1024
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

}  // namespace helixmla_tc

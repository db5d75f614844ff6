// Device primitives the engines share: the u32/u16/u64 types, shared
// addresses and swizzles, copies, ldmatrix/stmatrix and mma.sync,
// conversions, the exp2 reference rules, wgmma fences and descriptors,
// named barriers, setmaxnreg and register pins, mbarriers and TMA, launder.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/knobs.cuh"
#include "cuda/tensorcore/params.cuh"

namespace helixmla_tc {

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

// Whether a row's softmax sum l says it saw keys: 0 means none. Not l > 0:
// NaN that reached the row's scores makes l NaN, and o and l must stay NaN
// (the combines treat a NaN l as poison, 0 as nothing seen) rather than pass
// for an empty row that a split combine drops from a finite answer.
__device__ __forceinline__ bool saw_keys(float l) { return l != 0.0f; }

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

// mbarriers of the seesaw engine: each phase completes when `count`
// arrivals are in, a thread's counted only once its earlier cp.async copies
// have landed (the .noinc form, which leaves the pending count alone).
__device__ __forceinline__ void mbarrier_init(u32 bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// A TMA phase: one thread arrives for all `count` of the phase, expecting
// the bytes its tensor copies will deliver. (cp.async.mbarrier.arrive
// without .noinc would let a barrier of one arrival take per-thread copies
// too, but compute-sanitizer synccheck does not model its raised pending
// count and aborts the kernel: scripts/probes/synccheck_counted_arrive.cu.)
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes, u32 count) {
  asm volatile(
      "{\n.reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0], %2;\n}\n" ::"r"(bar),
      "r"(bytes), "r"(count - 1)
      : "memory");
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

}  // namespace helixmla_tc

// Prototype, not part of the library (bench/RESULTS.md, session 28): fp8 KV
// decode with fp8 matrix steps and 16-bit accuracy. Tokens are wgmma's M
// and heads its N (no padding to 64 rows), as in swapped_fp8_rs.cu, but no
// KV byte is widened: K is wgmma's A straight from shared memory, V^T is
// its A from registers (bytes transposed with prmt), and Q and P are split
// into e4m3 high and low parts, each pair entered as a doubled reduction:
//
//   S^T[64 x H] = K Qhi^T + K Qlo^T          (A = K, shared; B = Q', shared)
//   O^T[512 x H] += V^T Phi^T + V^T Plo^T    (A = V^T, registers; B = P^T)
//
// Question: does this reach issue 4's fp8 bar (0.6x of the bf16 twin: case
// 10 ~188 us, case 11 ~168 us on the session-28 suite) and at what
// accuracy? fp8 steps run at twice the 16-bit rate, so the high/low pair
// costs what one 16-bit step costs, but over H heads rather than 64 rows
// and with no widening.
//
// Block: two warpgroups, one work item (a request, or a part of one). With
// 48 heads, as in swapped_fp8_rs.cu: warpgroup 0 computes S^T of even
// tiles, warpgroup 1 of odd ones; each keeps O^T for 256 latents and
// multiplies both tiles' P^T into it; one reference maximum per head for
// the block, raised only when a score passes it by 2^8. With 16 heads each
// warpgroup owns its tiles whole (O^T of 512 latents is 64 registers) and
// the two never wait for each other; the combine merges both halves. KV
// arrives by cp.async into four 64-token stages laid out as wgmma wants
// them: four 128-byte column blocks with the 128-byte swizzle and the rope
// block with the 64-byte one; a warp copies whole rows, consecutive lanes
// consecutive 16-byte chunks.
//
// V^T fragments: a thread loads the word (4 latents) 8 warp + g of a block
// row for eight tokens of a 32-token step and transposes the 4 x 4 byte
// blocks with prmt: latents +0/+1 are rows g/g+8 of one m-block, +2/+3 of
// the next. Its tokens 2c, 2c+8, 2c+1, 2c+9 (then +16) are positions
// 4c..4c+3 (16+4c..) of the step: rows 2c and 2c+1 differ mod 8 from those
// of the other lanes, so the loads are free of bank conflicts, and S^T's
// rows g and g+8 land on adjacent positions, so P^T is written in u16.
//
// Measured (one H200, session 28; bench/RESULTS.md): rel L2 2.5-2.8e-3
// against a float64 reference (the library's bf16 cases: 1.5e-3, its fp8
// path 5e-4; tolerance 3e-2), log-sum-exp within 7e-6; memcheck and
// racecheck clean. Case 11's shape 164 us (library 187, bar 168: 0.586x
// case 5), case 10's 255-257 (library 358, bar 188). The steps that got
// there: lockstep warpgroups 242 / 324 us; own tiles at 16 heads 204;
// copies coalesced per row (the two-threads-a-row copy cost 16 shared
// wavefronts an instruction, 57% of the pipe's) 170 / 255; the two halves
// merged in the kernel at 16 heads (no combine launch) 164. Tried and not
// kept: S over 2, 3 or 6 accumulator chains (C7512 serialises wgmma at 3
// and 6: 315 us), Q's parts side by side in N (reads K once; no change),
// page ids staged in shared memory (PAGES_IN_SMEM=1: -1% at 48 heads, +3%
// at 16), PROMOTE=1 (O^T of a pair summed in float32: rel L2 1.9e-3, but
// 371 / 461 us: spills).
//
// Session 29 (bench/RESULTS.md): at 48 heads S, P V and the copies alone
// (ABLATE=2, no softmax) take 200 us, above the bar, and decoupled
// warpgroups (each raising its own maxima and multiplying its own P^T
// first; 0beecda, not kept) took 250: the two-part steps, not the
// lockstep, hold case 10 back. Q in one part (Q_PARTS=1): 230 us at ten
// times the error.
//
// Simplified against the library: page size 64, full tiles, kv_len a
// multiple of 128 x ITEMS, q_len 1, one fp8 scale of 1.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DHEADS=48 -DITEMS=2 swapped_fp8_native.cu -o n48
//   ./n48 [REQUESTS=64] [KV_LEN=16384] [ITERS=20]
//   (case 11: -DHEADS=16 -DITEMS=1, ./n16 128 8192)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

typedef uint32_t u32;
typedef uint64_t u64;

#ifndef HEADS
#define HEADS 48
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef PAGES_IN_SMEM
#define PAGES_IN_SMEM 0
#endif
#ifndef ABLATE
// Timing only (outputs wrong): 1 drops the maxima's exchange, 2 also P
// (no barrier between the warpgroups: each runs its S and P V alone),
// 3 also P V (S and the copies), 4 S instead (P V and the copies), 5 all
// three (the copies alone).
#define ABLATE 0
#endif
#ifndef Q_PARTS
// 1: S from Q's high part alone (half of S's steps; an accuracy trade the
// library does not make, measured here to size it).
#define Q_PARTS 2
#endif
#ifndef PROMOTE
#define PROMOTE 0  // 1: O^T of each pair summed in a fresh accumulator, then added in float32
#endif
constexpr int kH = HEADS;  // wgmma's N: 16 or 48
// With 16 heads O^T of all 512 latents takes 64 registers, so each
// warpgroup owns whole tiles (even or odd) and keeps its own maxima, sums
// and O: no barrier couples the two, which then overlap. With 48 heads
// each keeps O^T of 256 latents and both multiply every tile's P^T.
constexpr bool kOwnTiles = kH <= 16;
constexpr int kGroupThreads = kOwnTiles ? 128 : 256;  // threads that share a tile, a maximum and O
constexpr int kPvBlocks = kOwnTiles ? 4 : 2;           // 128-latent blocks in this warpgroup's O^T
constexpr int kParts = kOwnTiles ? 2 : 1;              // partial results an item writes
// One item a request with own tiles: warpgroup 1 hands its O^T and (m, l)
// to warpgroup 0 through shared memory, which writes the output; no
// combine launch.
constexpr bool kFused = kOwnTiles && ITEMS == 1;
constexpr int kD = 576, kDV = 512, kT = 64;
constexpr int kAcc = kH / 2;  // accumulator registers of m64nHk32
constexpr int kJ = kH / 8;    // 8-column groups of the accumulator
constexpr int kStages = 4;
constexpr int kBlockBytes = kT * 128;                    // one 128-byte column block of a tile
constexpr int kRopeOff = 4 * kBlockBytes;                // rope block: 64 rows x 64 bytes
constexpr int kTileBytes = kRopeOff + kT * 64;           // 36 KB
constexpr int kQBytes = 2 * (4 * kH * 128 + kH * 64);    // Q': rows [0, H) high, [H, 2H) low
constexpr int kPBytes = kH * 128;                        // P^T of a tile: H rows of [64 high | 64 low]
constexpr int kQOff = 0;
constexpr int kKvOff = kQOff + kQBytes;
constexpr int kPOff = kKvOff + kStages * kTileBytes;     // four: (pair parity, warpgroup)
constexpr int kScaleOff = kPOff + 4 * kPBytes;           // per head: log2-domain factor of S
constexpr int kBarOff = kScaleOff + kH * 4;
constexpr int kScratchOff = kBarOff + kStages * 8;       // [8 warps][H] floats
constexpr int kPagesOff = kScratchOff + 8 * kH * 4;      // the item's page ids
constexpr int kMaxTiles = 256;
constexpr int kSmemBytes = kPagesOff + kMaxTiles * 4 + 1024;
constexpr int kThreads = 256;
constexpr float kSlack = 8.0f;  // log2 units: P <= 256, inside e4m3's 448
static_assert(kH % 16 == 0 && kH <= 64, "heads: a multiple of 16 up to 64");
static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0, "swizzle atoms stay aligned");

__device__ __forceinline__ u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }
// K-major descriptor: 128-byte swizzle (layout 1, 8-row stride 1024) or
// 64-byte swizzle (layout 2, stride 512).
__device__ __forceinline__ u64 desc_sw128(u32 addr) {
  return static_cast<u64>((addr & 0x3FFFFu) >> 4) | static_cast<u64>(1) << 16 | static_cast<u64>(1024 >> 4) << 32 |
         static_cast<u64>(1) << 62;
}
__device__ __forceinline__ u64 desc_sw64(u32 addr) {
  return static_cast<u64>((addr & 0x3FFFFu) >> 4) | static_cast<u64>(1) << 16 | static_cast<u64>(512 >> 4) << 32 |
         static_cast<u64>(2) << 62;
}
// Offset of byte c of row r in a 128-byte-swizzled block, and in the
// 64-byte-swizzled rope block.
__device__ __host__ __forceinline__ int sw128(int r, int c) { return r * 128 + ((((c >> 4) ^ r) & 7) << 4) + (c & 15); }
__device__ __host__ __forceinline__ int sw64(int r, int c) {
  return r * 64 + ((((c >> 4) ^ (r >> 1)) & 3) << 4) + (c & 15);
}
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
// Two floats to e4m3 bytes: lo in the low byte.
__device__ __forceinline__ uint16_t to_e4m3x2(float lo, float hi) {
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float2 from_e4m3x2(uint16_t x) {
  u32 h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(x));
  return __half22float2(*reinterpret_cast<__half2*>(&h));
}
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Barriers among the threads that share a tile: ids 1-3 for the block, or
// 1-3 and 5-7 for each warpgroup's own.
__device__ __forceinline__ void bar_sync(int id) {
  const int wg = kOwnTiles ? threadIdx.x >> 7 : 0;
  asm volatile("bar.sync %0, %1;\n" ::"r"(id + 4 * wg), "n"(kGroupThreads) : "memory");
}
__device__ __forceinline__ bool bar_or(int id, bool p) {
  const int wg = kOwnTiles ? threadIdx.x >> 7 : 0;
  u32 r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<u32>(p)), "r"(id + 4 * wg), "n"(kGroupThreads)
      : "memory");
  return r != 0;
}

#define D16_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define D16_OPS(d)                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define D48_TEXT                                                                                            \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}"
#define D48_OPS(d)                                                                                          \
  D16_OPS(d), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),    \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
      "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), \
      "+f"(d[47])
#if HEADS == 48
#define WG_N2 "96"
#define D2_TEXT D48_TEXT
#define D2_OPS D48_OPS
#define SS2_ARGS "%48, %49"
#define SS2_PRED "%50"
#define WG_N "48"
#define D_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}"
#define D_OPS(d)                                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define RS_ARGS "{%24,%25,%26,%27}, %28"
#define SS1_A "24"
#define SS1_B "25"
#define SS1_PRED "26"
#define RS_PRED "%29"
#elif HEADS == 16
#define WG_N2 "32"
#define D2_TEXT D16_TEXT
#define D2_OPS D16_OPS
#define SS2_ARGS "%16, %17"
#define SS2_PRED "%18"
#define WG_N "16"
#define D_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7}"
#define D_OPS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define RS_ARGS "{%8,%9,%10,%11}, %12"
#define SS1_A "8"
#define SS1_B "9"
#define SS1_PRED "10"
#define RS_PRED "%13"
#else
#error "HEADS: 16 or 48"
#endif
// D[64 x 2H] (+)= A[64 x 32] B[2H x 32]^T, e4m3, both from shared memory.
__device__ __forceinline__ void mma_ss(float (&d)[2 * kAcc], u64 desc_a, u64 desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SS2_PRED ", 0;\n"
               "wgmma.mma_async.sync.aligned.m64n" WG_N2 "k32.f32.e4m3.e4m3 " D2_TEXT ", " SS2_ARGS ", p, 1, 1;\n}\n"
               : D2_OPS(d)
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
// D[64 x H] (+)= A[64 x 32] B[H x 32]^T, both from shared memory.
__device__ __forceinline__ void mma_ss1(float (&d)[kAcc], u64 desc_a, u64 desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SS1_PRED ", 0;\n"
               "wgmma.mma_async.sync.aligned.m64n" WG_N "k32.f32.e4m3.e4m3 " D_TEXT ", %" SS1_A ", %" SS1_B ", p, 1, 1;\n}\n"
               : D_OPS(d)
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
// The same with A from registers.
__device__ __forceinline__ void mma_rs(float (&d)[kAcc], const u32 (&a)[4], u64 desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RS_PRED ", 0;\n"
               "wgmma.mma_async.sync.aligned.m64n" WG_N "k32.f32.e4m3.e4m3 " D_TEXT ", " RS_ARGS ", p, 1, 1;\n}\n"
               : D_OPS(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

struct Params {
  const unsigned char* pool;  // [pages][64][576] e4m3
  const int* page_table;      // [requests][pages per request]
  const __nv_bfloat16* q;     // [requests][H][576]
  float* part_o;              // [items][parts][H][512], normalised
  float* part_ml;             // [items][parts][H][2]: m (log2, scaled), l
  int pages_per_request;
  float scale_log2;           // softmax scale * log2(e)
  __nv_bfloat16* out;         // [requests][H][512] (kFused)
  float* lse2;                // [requests][H] (kFused)
};

__global__ void __launch_bounds__(kThreads, 1) native_fp8_decode(Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127, warp = t >> 5, lane = tid & 31;
  const int g = lane >> 2, c4 = lane & 3;
  const int item = blockIdx.x, request = item / ITEMS;
  const int tiles = p.pages_per_request / ITEMS;
  const int* pages = p.page_table + static_cast<size_t>(request) * p.pages_per_request + (item % ITEMS) * tiles;
#if PAGES_IN_SMEM
  // Page ids from shared memory (their global loads sat right before the
  // copies that need them).
  {
    int* staged = reinterpret_cast<int*>(smem + kPagesOff);
    for (int i = tid; i < tiles; i += kThreads) staged[i] = pages[i];
    pages = staged;
  }
#endif
  const u32 base = smem_addr(smem);
  const u32 bar0 = base + kBarOff;
  float* scratch = reinterpret_cast<float*>(smem + kScratchOff);
  float* head_scale = reinterpret_cast<float*>(smem + kScaleOff);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar0 + 8 * s), "r"(kGroupThreads) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q' = Q q_scale split into e4m3 high and low parts, q_scale per head
  // putting its largest magnitude at 224 (the low part then keeps four more
  // bits down to e4m3's subnormals). A warp per head.
  for (int h = tid >> 5; h < kH; h += kThreads / 32) {
    const __nv_bfloat16* qh = p.q + (static_cast<size_t>(request) * kH + h) * kD;
    float amax = 0.0f;
    for (int c = lane; c < kD; c += 32) amax = fmaxf(amax, fabsf(__bfloat162float(qh[c])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float qs = amax > 0.0f ? 224.0f / amax : 1.0f;
    if (lane == 0) head_scale[h] = p.scale_log2 / qs;
    for (int c = 2 * lane; c < kD; c += 64) {
      const float v0 = __bfloat162float(qh[c]) * qs, v1 = __bfloat162float(qh[c + 1]) * qs;
      const uint16_t hi = to_e4m3x2(v0, v1);
      const float2 back = from_e4m3x2(hi);
      const uint16_t lo = to_e4m3x2(v0 - back.x, v1 - back.y);
      auto at = [&](int row) {
        return c < 512 ? (c / 128) * 2 * kH * 128 + sw128(row, c % 128) : 8 * kH * 128 + sw64(row, c - 512);
      };
      *reinterpret_cast<uint16_t*>(smem + kQOff + at(h)) = hi;
      *reinterpret_cast<uint16_t*>(smem + kQOff + at(kH + h)) = lo;
    }
  }
  fence_async();
  __syncthreads();

  // Copies: with own tiles a warpgroup copies its tiles whole; otherwise
  // warpgroup 0 refills column blocks 0 and 1 and the rope, warpgroup 1
  // blocks 2 and 3: the latents each reads in P V. Warp w copies rows
  // 16 w .. 16 w + 15, consecutive lanes consecutive 16-byte chunks of a row
  // (a row's 512 bytes, or two rows' 256), so an instruction touches four
  // 128-byte lines; the rope goes four lanes to a row. (Two threads to a
  // row, every other chunk each, took 16 shared wavefronts an instruction:
  // one per row's line.)
  const int main_first = kOwnTiles || wg == 0 ? 0 : 16;  // first chunk of this warpgroup's blocks
  const int lane_row = kOwnTiles ? 0 : lane >> 4;         // two rows an instruction without own tiles
  const int lane_chunk = kOwnTiles ? lane : main_first + (lane & 15);
  const u32 main_dst = (lane_chunk / 8) * kBlockBytes + (16 * warp + lane_row) * 128;
  const u32 main_xor = (lane_chunk ^ lane_row) & 7;
  const u32 main_src = (16 * warp + lane_row) * kD + lane_chunk * 16;
  const int rope_row = 16 * warp + (lane >> 2), rope_chunk = lane & 3;
  const u32 rope_dst = kRopeOff + rope_row * 64 + (((rope_chunk ^ (rope_row >> 1)) & 3) << 4);
  const u32 rope_src = rope_row * kD + 512 + rope_chunk * 16;
  constexpr int kMainCopies = kOwnTiles ? 16 : 8;
  const bool copies_rope = kOwnTiles || wg == 0;
  auto load_tile = [&](int tile, int page) {
    const unsigned char* src = p.pool + static_cast<size_t>(page) * kTileBytes;
    const u32 dst = base + kKvOff + (tile % kStages) * kTileBytes;
#pragma unroll
    for (int k = 0; k < kMainCopies; ++k) {
      const int row_step = kOwnTiles ? k : 2 * k;  // rows 16 w + row_step (+ lane_row)
      cp_async_16(dst + main_dst + row_step * 128 + ((main_xor ^ (row_step & 7)) << 4), src + main_src + row_step * kD);
    }
    if (copies_rope) {
#pragma unroll
      for (int h = 0; h < 2; ++h) cp_async_16(dst + rope_dst + h * 8 * 64, src + rope_src + h * 8 * kD);
    }
    cp_async_arrive(bar0 + 8 * (tile % kStages));
  };
  for (int tile = 0; tile < kStages && tile < tiles; ++tile)
    if (!kOwnTiles || tile % 2 == wg) load_tile(tile, pages[tile]);

  float o[2 * kPvBlocks][kAcc];
#pragma unroll
  for (int m = 0; m < 2 * kPvBlocks; ++m)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) o[m][i] = 0.0f;
  float m_ref[2 * kJ], l_run[2 * kJ], f_head[2 * kJ];  // heads 8 j + 2 c4 + e at 2 j + e
#pragma unroll
  for (int i = 0; i < 2 * kJ; ++i) {
    m_ref[i] = -INFINITY;
    l_run[i] = 0.0f;
    f_head[i] = head_scale[8 * (i / 2) + 2 * c4 + (i % 2)];
  }
  const u32 q_base = base + kQOff;
  // V^T: this thread's word (4 latents) of a block row is 8 warp + g; its
  // token rows 2 c4 (+1 for the odd loads) set the swizzle.
  u32 v_off[2];
#pragma unroll
  for (int odd = 0; odd < 2; ++odd)
    v_off[odd] = (2 * c4) * 128 + ((((2 * warp + (g >> 2)) ^ (2 * c4 + odd)) & 7) << 4) + (g & 3) * 4 + odd * 128;
  // P^T: rows g and g + 8 of this warp's S^T are positions x0 and x0 + 1.
  const int x0 = 32 * (warp >> 1) + 16 * (warp & 1) + 4 * (g >> 1) + 2 * (g & 1);

  float s_sink = 0.0f;
  const int pairs = tiles / 2;
  for (int pair = 0; pair < pairs; ++pair) {
    const int next0 = 2 * pair + 4 < tiles ? pages[2 * pair + 4] : 0;
    const int next1 = 2 * pair + 5 < tiles ? pages[2 * pair + 5] : 0;
    const int own = 2 * pair + wg;
    const u32 own_stage = base + kKvOff + (own % kStages) * kTileBytes;
    mbar_wait(bar0 + 8 * (own % kStages), (own / kStages) & 1);
    fence_async();  // the copies' bytes, now read by wgmma
    // S^T: Q's high and low parts side by side in N, so each step reads K
    // once; their columns land in the same thread (j and j + H / 8).
    float s_both[2 * kAcc];
    wg_fence();
#pragma unroll
    for (int step = 0; step < (ABLATE >= 4 ? 0 : 18); ++step) {
      const int block = step / 4, k = step % 4;
      const u64 a = block < 4 ? desc_sw128(own_stage + block * kBlockBytes + 32 * k)
                              : desc_sw64(own_stage + kRopeOff + 32 * k);
      const u64 b = block < 4 ? desc_sw128(q_base + block * 2 * kH * 128 + 32 * k)
                              : desc_sw64(q_base + 8 * kH * 128 + 32 * k);
      if constexpr (Q_PARTS == 1)
        mma_ss1(*reinterpret_cast<float(*)[kAcc]>(s_both), a, b, step > 0);
      else
        mma_ss(s_both, a, b, step > 0);
    }
    wg_commit();
    wg_wait<0>();
    float s[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      s[i] = (Q_PARTS == 1 ? s_both[i] : s_both[i] + s_both[kAcc + i]) * f_head[2 * (i / 4) + (i & 1)];
    if (ABLATE == 2 || ABLATE == 3) {
      // S's results are otherwise dead there, and ptxas drops their steps.
#pragma unroll
      for (int i = 0; i < kAcc; ++i) s_sink += s[i];
    }

    bool over = false;
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) over |= fmaxf(s[4 * j + e], s[4 * j + 2 + e]) > m_ref[2 * j + e] + kSlack;
    if (ABLATE == 0 && bar_or(1, over)) {
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float mx = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
          if (g == 0) scratch[(wg * 4 + warp) * kH + 8 * j + 2 * c4 + e] = mx;
        }
      bar_sync(2);
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float mx = m_ref[2 * j + e];
          for (int w = kOwnTiles ? 4 * wg : 0; w < (kOwnTiles ? 4 * wg + 4 : 8); ++w)
            mx = fmaxf(mx, scratch[w * kH + 8 * j + 2 * c4 + e]);
          const float f = m_ref[2 * j + e] == -INFINITY ? 0.0f : exp2f(m_ref[2 * j + e] - mx);
          m_ref[2 * j + e] = mx;
          l_run[2 * j + e] *= f;
#pragma unroll
          for (int m = 0; m < 2 * kPvBlocks; ++m) {
            o[m][4 * j + e] *= f;
            o[m][4 * j + 2 + e] *= f;
          }
        }
      bar_sync(2);
    }
    // P^T in e4m3 high and low parts: row = head, bytes [0, 64) high and
    // [64, 128) low, positions x0 (row g) and x0 + 1 (row g + 8) as a u16.
    const u32 p_own = base + kPOff + ((pair & 1) * 2 + wg) * kPBytes;
#pragma unroll
    for (int j = 0; j < (ABLATE >= 2 ? 0 : kJ); ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float a = exp2f(s[4 * j + e] - m_ref[2 * j + e]);
        const float b = exp2f(s[4 * j + 2 + e] - m_ref[2 * j + e]);
        l_run[2 * j + e] += a + b;
        const uint16_t hi = to_e4m3x2(a, b);
        const float2 back = from_e4m3x2(hi);
        const uint16_t lo = to_e4m3x2(a - back.x, b - back.y);
        const int head = 8 * j + 2 * c4 + e;
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(p_own + sw128(head, x0)), "h"(hi) : "memory");
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(p_own + sw128(head, 64 + x0)), "h"(lo) : "memory");
      }
    fence_async();
    if (ABLATE < 2) bar_sync(3);

    // P V: both tiles of the pair, this warpgroup's 256 latents as four
    // m-blocks; m-block 2 q + b, rows g / g + 8 are latents
    // 128 (2 wg + q) + 4 (8 warp + g) + 2 b + 0 / 1.
    if (!kOwnTiles) {
      const int other = 2 * pair + (wg ^ 1);
      mbar_wait(bar0 + 8 * (other % kStages), (other / kStages) & 1);
    }
#if PROMOTE
    float fresh[2 * kPvBlocks][kAcc];
#endif
#pragma unroll
    for (int tp = 0; tp < (ABLATE == 3 || ABLATE == 5 ? 0 : 2); ++tp) {
      if (kOwnTiles && tp != wg) continue;
      const u32 stage = base + kKvOff + ((2 * pair + tp) % kStages) * kTileBytes;
      const u32 p_tile = base + kPOff + ((pair & 1) * 2 + tp) * kPBytes;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        u32 f[kPvBlocks][2][4];  // [q][m-block of the pair][reg]
#pragma unroll
        for (int q = 0; q < kPvBlocks; ++q) {
          const u32 row0 = stage + (kOwnTiles ? q : 2 * wg + q) * kBlockBytes + 32 * kk * 128;
          u32 w[8];
          // Loads i: token rows 0, 8, 1, 9, 16, 24, 17, 25 (+ 2 c4) of the step.
          constexpr int kRow[8] = {0, 8, 0, 8, 16, 24, 16, 24};
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int odd = (i >> 1) & 1;
            asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w[i]) : "r"(row0 + kRow[i] * 128 + v_off[odd]));
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const u32 x01 = prmt(w[4 * h], w[4 * h + 1], 0x5140), x23 = prmt(w[4 * h + 2], w[4 * h + 3], 0x5140);
            const u32 y01 = prmt(w[4 * h], w[4 * h + 1], 0x7362), y23 = prmt(w[4 * h + 2], w[4 * h + 3], 0x7362);
            f[q][0][2 * h] = prmt(x01, x23, 0x5410);
            f[q][0][2 * h + 1] = prmt(x01, x23, 0x7632);
            f[q][1][2 * h] = prmt(y01, y23, 0x5410);
            f[q][1][2 * h + 1] = prmt(y01, y23, 0x7632);
          }
        }
        wg_fence();
#pragma unroll
        for (int q = 0; q < kPvBlocks; ++q)
#pragma unroll
          for (int b = 0; b < 2; ++b)
#pragma unroll
            for (int part = 0; part < 2; ++part) {
              const u64 desc = desc_sw128(p_tile + 64 * part + 32 * kk);
#if PROMOTE
              mma_rs(fresh[2 * q + b], f[q][b], desc, (kOwnTiles ? 0 : tp) + kk + part > 0);
#else
              mma_rs(o[2 * q + b], f[q][b], desc, 1);
#endif
            }
        wg_commit();
      }
    }
    wg_wait<0>();
#if PROMOTE
#pragma unroll
    for (int m = 0; m < 2 * kPvBlocks; ++m)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) o[m][i] += fresh[m][i];
#else
#pragma unroll
    for (int m = 0; m < 2 * kPvBlocks; ++m)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(o[m][i])::"memory");
#endif
    // This warpgroup's columns of both tiles are read: refill them with the
    // tiles four ahead once its other warps are done with them too.
    asm volatile("bar.sync %0, 128;\n" ::"r"(8 + wg) : "memory");
    if (2 * pair + 4 < tiles && (!kOwnTiles || wg == 0)) load_tile(2 * pair + 4, next0);
    if (2 * pair + 5 < tiles && (!kOwnTiles || wg == 1)) load_tile(2 * pair + 5, next1);
  }
  if ((ABLATE == 2 || ABLATE == 3) && s_sink == 1.5e-30f) p.lse2[0] = s_sink;

#pragma unroll
  for (int i = 0; i < 2 * kJ; ++i) {
    float v = l_run[i];
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    l_run[i] = v;
  }
  bar_sync(2);
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) scratch[(wg * 4 + warp) * kH + 8 * j + 2 * c4 + e] = l_run[2 * j + e];
  }
  bar_sync(2);
#pragma unroll
  for (int j = 0; j < kJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float l = 0.0f;
      for (int w = kOwnTiles ? 4 * wg : 0; w < (kOwnTiles ? 4 * wg + 4 : 8); ++w) l += scratch[w * kH + 8 * j + 2 * c4 + e];
      l_run[2 * j + e] = l;
    }
  if constexpr (kFused) {
    // The KV stages are idle: every copy was waited for, every read done.
    float* hand = reinterpret_cast<float*>(smem + kKvOff);  // [m-block][reg][thread]
    float* hand_ml = hand + 2 * kPvBlocks * kAcc * 128;     // m of each head, then l
    if (wg == 1) {
#pragma unroll
      for (int m = 0; m < 2 * kPvBlocks; ++m)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) hand[(m * kAcc + i) * 128 + t] = o[m][i];
      if (warp == 0 && g == 0) {
#pragma unroll
        for (int i = 0; i < 2 * kJ; ++i) {
          const int head = 8 * (i / 2) + 2 * c4 + (i % 2);
          hand_ml[head] = m_ref[i];
          hand_ml[kH + head] = l_run[i];
        }
      }
    }
    __syncthreads();
    if (wg == 1) return;
    float a0[2 * kJ], a1[2 * kJ], inv[2 * kJ];
#pragma unroll
    for (int i = 0; i < 2 * kJ; ++i) {
      const int head = 8 * (i / 2) + 2 * c4 + (i % 2);
      const float m1 = hand_ml[head], l1 = hand_ml[kH + head], mx = fmaxf(m_ref[i], m1);
      a0[i] = m_ref[i] == -INFINITY ? 0.0f : exp2f(m_ref[i] - mx);
      a1[i] = m1 == -INFINITY ? 0.0f : exp2f(m1 - mx);
      const float l = l_run[i] * a0[i] + l1 * a1[i];
      inv[i] = 1.0f / l;
      if (warp == 0 && g == 0) p.lse2[static_cast<size_t>(request) * kH + head] = mx + log2f(l);
    }
#pragma unroll
    for (int q = 0; q < kPvBlocks; ++q) {
      const int latent0 = 128 * q + 4 * (8 * warp + g);
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 2 * j + e, head = 8 * j + 2 * c4 + e;
          auto merged = [&](int m, int r) {
            return (o[m][r] * a0[i] + hand[(m * kAcc + r) * 128 + t] * a1[i]) * inv[i];
          };
          const __nv_bfloat162 lo = __floats2bfloat162_rn(merged(2 * q, 4 * j + e), merged(2 * q, 4 * j + 2 + e));
          const __nv_bfloat162 hi =
              __floats2bfloat162_rn(merged(2 * q + 1, 4 * j + e), merged(2 * q + 1, 4 * j + 2 + e));
          uint2 v;
          v.x = *reinterpret_cast<const u32*>(&lo);
          v.y = *reinterpret_cast<const u32*>(&hi);
          *reinterpret_cast<uint2*>(p.out + (static_cast<size_t>(request) * kH + head) * kDV + latent0) = v;
        }
    }
    return;
  }
  const int part = item * kParts + (kOwnTiles ? wg : 0);
#pragma unroll
  for (int q = 0; q < kPvBlocks; ++q) {
    const int latent0 = 128 * (kOwnTiles ? q : 2 * wg + q) + 4 * (8 * warp + g);
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 8 * j + 2 * c4 + e;
        const float inv = 1.0f / l_run[2 * j + e];
        const float4 v = make_float4(o[2 * q][4 * j + e] * inv, o[2 * q][4 * j + 2 + e] * inv,
                                     o[2 * q + 1][4 * j + e] * inv, o[2 * q + 1][4 * j + 2 + e] * inv);
        *reinterpret_cast<float4*>(p.part_o + (static_cast<size_t>(part) * kH + head) * kDV + latent0) = v;
      }
  }
  if ((kOwnTiles || wg == 0) && warp == 0 && g == 0) {
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 8 * j + 2 * c4 + e;
        p.part_ml[(static_cast<size_t>(part) * kH + head) * 2] = m_ref[2 * j + e];
        p.part_ml[(static_cast<size_t>(part) * kH + head) * 2 + 1] = l_run[2 * j + e];
      }
  }
}

// out[r][h] = the items' normalised outputs weighted by their l 2^(m - M);
// lse2[r][h] = M + log2(sum l 2^(m - M)).
__global__ void combine(const float* part_o, const float* part_ml, __nv_bfloat16* out, float* lse2) {
  const int rh = blockIdx.x, request = rh / kH, head = rh % kH;
  constexpr int kN = ITEMS * kParts;
  float m[kN], l[kN], mx = -INFINITY;
  for (int i = 0; i < kN; ++i) {
    const size_t e = static_cast<size_t>(request * kN + i) * kH + head;
    m[i] = part_ml[e * 2];
    l[i] = part_ml[e * 2 + 1];
    mx = fmaxf(mx, m[i]);
  }
  float w[kN], total = 0.0f;
  for (int i = 0; i < kN; ++i) {
    w[i] = l[i] * exp2f(m[i] - mx);
    total += w[i];
  }
  if (threadIdx.x == 0) lse2[rh] = mx + log2f(total);
  for (int c = threadIdx.x; c < kDV; c += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < kN; ++i) acc += w[i] * part_o[(static_cast<size_t>(request * kN + i) * kH + head) * kDV + c];
    out[static_cast<size_t>(rh) * kDV + c] = __float2bfloat16(acc / total);
  }
}

static float e4m3_to_float(unsigned char b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m) / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 64;
  const int kv_len = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  const int pages_per_request = kv_len / kT;
  if (pages_per_request % (2 * ITEMS) != 0 || pages_per_request / ITEMS < 4 || pages_per_request / ITEMS > kMaxTiles) {
    std::printf("kv_len must be a multiple of %d, from %d to %d\n", 2 * ITEMS * kT, 4 * ITEMS * kT,
                kMaxTiles * ITEMS * kT);
    return 1;
  }
  const int pages = requests * pages_per_request;
  std::mt19937 rng(28);
  std::vector<unsigned char> pool(static_cast<size_t>(pages) * kTileBytes);
  // Random e4m3 values in about [-2, 2] (exponent field 0..8), no NaN.
  u64 x = 0x9E3779B97F4A7C15ull;
  for (auto& b : pool) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>((x & 0x80) | (((x >> 8) % 9) << 3) | ((x >> 16) & 7));
  }
  std::vector<int> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = i;
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<__nv_bfloat16> q(static_cast<size_t>(requests) * kH * kD);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (auto& v : q) v = __float2bfloat16(uni(rng));
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));

  unsigned char* d_pool;
  int* d_table;
  __nv_bfloat16 *d_q, *d_out;
  float *d_po, *d_pml, *d_lse;
  const int items = requests * ITEMS;
  const size_t out_elems = static_cast<size_t>(requests) * kH * kDV;
  CHECK(cudaMalloc(&d_pool, pool.size()));
  CHECK(cudaMalloc(&d_table, table.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_q, q.size() * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&d_out, out_elems * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&d_lse, static_cast<size_t>(requests) * kH * sizeof(float)));
  CHECK(cudaMalloc(&d_po, static_cast<size_t>(items) * kParts * kH * kDV * sizeof(float)));
  CHECK(cudaMalloc(&d_pml, static_cast<size_t>(items) * kParts * kH * 2 * sizeof(float)));
  CHECK(cudaMemcpy(d_pool, pool.data(), pool.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_table, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_q, q.data(), q.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_out, 0xff, out_elems * sizeof(__nv_bfloat16)));
  CHECK(cudaMemset(d_lse, 0xff, static_cast<size_t>(requests) * kH * sizeof(float)));

  Params prm{d_pool, d_table, d_q, d_po, d_pml, pages_per_request, scale * 1.4426950408889634f, d_out, d_lse};
  CHECK(cudaFuncSetAttribute(native_fp8_decode, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  auto launch = [&]() {
    native_fp8_decode<<<items, kThreads, kSmemBytes>>>(prm);
    if (!kFused) combine<<<requests * kH, 128>>>(d_po, d_pml, d_out, d_lse);
  };
  launch();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  // Reference (double) for three requests, every head: output and the
  // log-sum-exp of the scaled scores (natural log).
  std::vector<__nv_bfloat16> out(out_elems);
  std::vector<float> lse2(static_cast<size_t>(requests) * kH);
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(lse2.data(), d_lse, lse2.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double err2 = 0.0, ref2 = 0.0, lse_err = 0.0;
  bool finite = true;
  for (int r : {0, requests / 2, requests - 1}) {
    std::vector<float> kv(static_cast<size_t>(kv_len) * kD);
    for (int j = 0; j < kv_len; ++j) {
      const unsigned char* row = pool.data() + static_cast<size_t>(table[r * pages_per_request + j / kT]) * kTileBytes +
                                 (j % kT) * kD;
      for (int c = 0; c < kD; ++c) kv[static_cast<size_t>(j) * kD + c] = e4m3_to_float(row[c]);
    }
    for (int h = 0; h < kH; ++h) {
      const __nv_bfloat16* qh = q.data() + (static_cast<size_t>(r) * kH + h) * kD;
      std::vector<double> sc(kv_len);
      double mx = -1e300;
      for (int j = 0; j < kv_len; ++j) {
        double acc = 0.0;
        for (int c = 0; c < kD; ++c) acc += static_cast<double>(__bfloat162float(qh[c])) * kv[static_cast<size_t>(j) * kD + c];
        sc[j] = acc * scale;
        mx = std::max(mx, sc[j]);
      }
      double l = 0.0;
      std::vector<double> acc(kDV, 0.0);
      for (int j = 0; j < kv_len; ++j) {
        const double pj = std::exp(sc[j] - mx);
        l += pj;
        for (int c = 0; c < kDV; ++c) acc[c] += pj * kv[static_cast<size_t>(j) * kD + c];
      }
      const double lse_ref = mx + std::log(l);
      const double lse_got = static_cast<double>(lse2[static_cast<size_t>(r) * kH + h]) * std::log(2.0);
      lse_err = std::max(lse_err, std::fabs(lse_got - lse_ref) / std::max(1.0, std::fabs(lse_ref)));
      for (int c = 0; c < kDV; ++c) {
        const double ref = acc[c] / l;
        const double got = __bfloat162float(out[(static_cast<size_t>(r) * kH + h) * kDV + c]);
        finite = finite && std::isfinite(got);
        err2 += (got - ref) * (got - ref);
        ref2 += ref * ref;
      }
    }
  }
  std::printf("heads %d items %d promote %d: rel L2 %.3e, lse rel err max %.3e (requests 0, %d, %d)%s\n", kH, ITEMS,
              PROMOTE, std::sqrt(err2 / ref2), lse_err, requests / 2, requests - 1, finite ? "" : " NON-FINITE");

  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> times, attn_times;
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms * 1000.0f);
    CHECK(cudaEventRecord(a));
    native_fp8_decode<<<items, kThreads, kSmemBytes>>>(prm);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&ms, a, b));
    attn_times.push_back(ms * 1000.0f);
  }
  std::sort(times.begin(), times.end());
  std::sort(attn_times.begin(), attn_times.end());
  const double bytes = static_cast<double>(requests) * kv_len * kD;
  std::printf("requests %d kv %d: attention + combine %.1f us (attention %.1f), %.0f GB/s of KV\n", requests, kv_len,
              times[times.size() / 2], attn_times[attn_times.size() / 2], bytes / (times[times.size() / 2] * 1e3));
  return 0;
}

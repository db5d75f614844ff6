// Prototype, not part of the library (bench/RESULTS.md, session 26): fp8
// KV decode for case 10's shape (48 heads, q_len 1) with tokens as wgmma's
// M and heads as its N, so 48 heads take m64n48k16 steps instead of being
// padded to a 64-row tile (a quarter less matrix work), and with the fp8
// K and V^T widened in registers and fed as wgmma's A operand, so no
// widened copy goes through shared memory. Question: can such an engine
// take case 10 under the 0.6x bar (~200 us against case 4's ~333)?
// bench/prototypes/fp8_widen_rates.cu measured its parts first.
//
//   S^T[64 tokens x 48 heads] = K[64 x 576] Q'^T  (A = K widened, B = Q')
//   O^T[512 x 48] += V^T[512 x 64] P^T[64 x 48]    (A = V^T widened, B = P^T)
//
// Widening: K by cvt.rn.f16x2.e4m3x2 (K_CVT=1, the default: the faster on
// an H200), or, like V always, by integers: an e4m3 byte b becomes the f16
// with b's sign and its seven other bits shifted to f16's exponent and
// mantissa, exactly b / 256 (normal and subnormal alike): one prmt (two
// bytes, sign-extended into 16-bit halves), one shift, one and for two
// values. The 1/256 folds into the softmax scale (K) and the output (V). A
// K fragment's bytes come by ldmatrix (byte pairs as b16), so S's
// reduction order is permuted; Q' is Q permuted the same way. A V^T
// fragment takes four 4-byte words (four tokens, four latents) and pairs
// one latent's bytes of two tokens; its rows are latents in an order the
// output store undoes.
//
// Block: two warpgroups, one work item (a request's half: 128 tiles of 64
// tokens). Warpgroup 0 computes S^T of even tiles, warpgroup 1 of odd ones;
// each keeps O^T for 256 latents and multiplies both tiles' P^T into it.
// The softmax keeps one reference maximum per head for the block, raised
// (with O and l rescaled) only when a score passes it by 2^8: one barrier
// with a predicate OR per pair, plus one for P^T. KV arrives by cp.async
// into four 64-token stages, 16-byte chunks XOR-swizzled per row; each
// warpgroup refills the columns it reads in P V once its P V is done.
//
// Measured (one H200, session 26): correct (rel L2 1.6e-3 against a
// float64 reference), memcheck and racecheck clean, but 362 us for the
// attention kernel (367 with the combine), against ~200 predicted and the
// library's 356: issue-bound at 1.24 instructions a cycle per SM, ~1500
// warp instructions per warp per pair of tiles, the tensor pipe a third
// busy; stalls short scoreboard 24%, long scoreboard 20%, fixed-latency
// waits 16%. Three or four batches of A fragments in flight (BUFFERS) and
// page ids read a pair ahead changed nothing; K by integers is 3% slower.
//
// Simplified against the library: page size 64, full tiles (no masking),
// kv_len a multiple of 256, 48 heads, q_len 1, two items per request.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a swapped_fp8_rs.cu -o swapped
//   ./swapped [REQUESTS=64] [KV_LEN=16384] [ITERS=20]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

constexpr int kD = 576, kDV = 512, kH = 48, kT = 64;
constexpr int kStages = 4;
constexpr int kTileBytes = kT * kD;             // fp8 tile: 36 KB
constexpr int kQBlockBytes = kH * 128;          // Q': 9 blocks of 64 columns x 48 heads
constexpr int kQBytes = 9 * kQBlockBytes;
constexpr int kPBytes = kH * 128;               // P^T of one tile: 48 heads x 64 tokens (f16)
constexpr int kQOff = 0;
constexpr int kKvOff = kQOff + kQBytes;
constexpr int kPOff = kKvOff + kStages * kTileBytes;  // four: (pair parity, warpgroup)
constexpr int kBarOff = kPOff + 4 * kPBytes;
constexpr int kScratchOff = kBarOff + kStages * 8;   // [2 warpgroups][4 warps][48] floats
constexpr int kSmemBytes = kScratchOff + 2 * 4 * kH * 4 + 1024;
constexpr int kThreads = 256;
constexpr int kItemsPerRequest = 2;
constexpr float kSlack = 8.0f;  // log2 units: P <= 256 in f16

__device__ __forceinline__ u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }
// Byte offset of 16-byte chunk c of token row t in a stage: chunks XOR-swizzled
// in groups of eight, so ldmatrix's eight rows fall on distinct bank groups.
__device__ __forceinline__ int kv_chunk(int t, int c) {
  return t * kD + ((c < 32 ? (c & ~7) | ((c ^ t) & 7) : 32 | ((c ^ t) & 3)) << 4);
}
__device__ __forceinline__ u64 desc_sw128(u32 addr) {
  return static_cast<u64>((addr & 0x3FFFFu) >> 4) | static_cast<u64>(1) << 16 | static_cast<u64>(1024 >> 4) << 32 |
         static_cast<u64>(1) << 62;
}
// e4m3 bytes (selected by prmt's selector from a, b) to an f16 pair, / 256.
template <u32 SEL>
__device__ __forceinline__ u32 widen(u32 a, u32 b) {
  u32 y;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(y) : "r"(a), "r"(b), "n"(SEL));
  return (y << 7) & 0xBF80BF80u;
}
#ifndef BUFFERS
#define BUFFERS 2  // A-fragment batches in flight: each batch's wgmmas run while the next ones load
#endif
constexpr int kBuffers = BUFFERS;
#ifndef K_CVT
#define K_CVT 1  // 0: K widened by integers, as V (Q' permuted to match either)
#endif
__device__ __forceinline__ u32 cvt_pair(uint16_t x) {
  u32 d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"(x));
  return d;
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
__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ bool bar_or(int id, bool p) {
  u32 r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, 256, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<u32>(p)), "r"(id)
      : "memory");
  return r != 0;
}

#define D24_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}"
#define D24_OPS(d)                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
// D[64 x 48] (+)= A[64 x 16] (registers, f16) B[48 x 16]^T (K-major, 128-byte swizzle).
__device__ __forceinline__ void mma(float (&d)[24], const u32 (&a)[4], u64 desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 " D24_TEXT ", {%24,%25,%26,%27}, %28, p, 1, 1, 0;\n}\n"
      : D24_OPS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

struct Params {
  const unsigned char* pool;     // [pages][64][576] e4m3
  const int* page_table;         // [requests][pages per request]
  const __nv_bfloat16* q;        // [requests][48][576]
  float* part_o;                 // [items][48][512], normalised
  float* part_ml;                // [items][48][2]: m (log2, scaled), l
  int pages_per_request;
  float scale_log2;              // softmax scale * log2(e) (* 256 for K's integer widening)
};

__global__ void __launch_bounds__(kThreads, 1) swapped_fp8_decode(Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127, warp = t >> 5, lane = tid & 31;
  const int g = lane >> 2, c4 = lane & 3;
  const int item = blockIdx.x, request = item / kItemsPerRequest;
  const int tiles = p.pages_per_request / kItemsPerRequest;
  const int* pages = p.page_table + static_cast<size_t>(request) * p.pages_per_request + (item % kItemsPerRequest) * tiles;
  const u32 base = smem_addr(smem);
  const u32 bar0 = base + kBarOff;
  float* scratch = reinterpret_cast<float*>(smem + kScratchOff);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar0 + 8 * s), "r"(kThreads) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q' (f16, permuted to the K fragments' byte order): element kk of k16
  // step s is Q's column 32 (s / 2) + 16 (s % 2) + 4 c + hi + 2 e, with
  // kk = 8 hi + 2 c + e (widen<0xA280> pairs bytes 0 and 2, <0xB391> 1 and 3).
  for (int i = tid; i < kH * kD; i += kThreads) {
    const int h = i / kD, col = i % kD, s = col / 16, kk = col % 16;
    // With K_CVT the pairs are bytes (0, 1) and (2, 3): kk = 8 hi + 2 c + e
    // is byte 4 c + 2 hi + e.
    const int src = K_CVT ? 32 * (s / 2) + 16 * (s % 2) + 4 * ((kk % 8) / 2) + 2 * (kk / 8) + (kk % 2)
                          : 32 * (s / 2) + 16 * (s % 2) + 4 * ((kk % 8) / 2) + (kk / 8) + 2 * (kk % 2);
    const float v = __bfloat162float(p.q[(static_cast<size_t>(request) * kH + h) * kD + src]);
    const int block = col / 64, in = col % 64;
    const int at = block * kQBlockBytes + h * 128 + ((((in * 2) >> 4) ^ (h & 7)) << 4) + (in * 2) % 16;
    *reinterpret_cast<__half*>(smem + at) = __float2half_rn(v);
  }
  fence_async();
  __syncthreads();

  // Copies: warpgroup 0 refills bytes [0, 256) and the rope [512, 576) of
  // each row, warpgroup 1 bytes [256, 512): the columns each reads in P V.
  // Two threads to a row, each every other chunk of its warpgroup's.
  const int copy_row = t >> 1, copy_half = t & 1;
  auto load_tile = [&](int tile, int page) {
    const int stage = tile % kStages;
    const unsigned char* src = p.pool + static_cast<size_t>(page) * kTileBytes + copy_row * kD;
    const u32 dst = base + kKvOff + stage * kTileBytes;
    if (wg == 0) {
#pragma unroll
      for (int i = 0; i < 10; ++i) {
        const int k = copy_half + 2 * i, c = k < 16 ? k : 16 + k;  // chunks 0..15 and 32..35
        cp_async_16(dst + kv_chunk(copy_row, c), src + c * 16);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = 16 + copy_half + 2 * i;
        cp_async_16(dst + kv_chunk(copy_row, c), src + c * 16);
      }
    }
    cp_async_arrive(bar0 + 8 * stage);
  };
  for (int tile = 0; tile < kStages && tile < tiles; ++tile) load_tile(tile, pages[tile]);

  float o[4][24];
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int i = 0; i < 24; ++i) o[m][i] = 0.0f;
  float m_ref[12], l_run[12];  // heads 8 j + 2 c4 + e at 2 j + e
#pragma unroll
  for (int i = 0; i < 12; ++i) {
    m_ref[i] = -INFINITY;
    l_run[i] = 0.0f;
  }
  float s[24];
  // Descriptors are linear in the address: a base and constant steps.
  const u64 q_desc = desc_sw128(base + kQOff);
  const u64 p_desc = desc_sw128(base + kPOff);
  // ldmatrix rows of this warp's 16 tokens: lane l gives row (l & 7) + 8 ((l >> 3) & 1), chunk half l >> 4.
  const int ld_row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int ld_half = lane >> 4;
  // kv_chunk(ld_row, 2 slab + ld_half) = ld_row 576 + 16 (group base) + k_xor[slab % 4]
  // (slab 16, 17: the rope's four chunks swizzle by two bits).
  u32 k_xor[4], k_rope_xor[2];
#pragma unroll
  for (int m = 0; m < 4; ++m) k_xor[m] = ((((2 * m) | ld_half) ^ ld_row) & 7) << 4;
#pragma unroll
  for (int m = 0; m < 2; ++m) k_rope_xor[m] = ((((2 * m) | ld_half) ^ ld_row) & 3) << 4;
  const u32 k_row = ld_row * kD;
  // V^T: this thread's latent word (four latents) in each m-block pair.
  const int word0 = 64 * wg + 8 * warp + g;
  // V^T word addresses: token 16 kk + 2 c4 + e + 8 h, chunk (word0 >> 2) + 8 q:
  // the swizzle sees only 2 c4 + e and word0, so v_off[e] + constants.
  u32 v_off[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int tok = 2 * c4 + e, c = word0 >> 2;
    v_off[e] = tok * kD + (((c & ~7) | ((c ^ tok) & 7)) << 4) + (word0 & 3) * 4;
  }

  const int pairs = tiles / 2;
  for (int pair = 0; pair < pairs; ++pair) {
    // The page ids of this pair's refills, read a pair's work ahead of use
    // (read at the refill, their latency stalled every warp there).
    const int next0 = 2 * pair + 4 < tiles ? pages[2 * pair + 4] : 0;
    const int next1 = 2 * pair + 5 < tiles ? pages[2 * pair + 5] : 0;
    const int own = 2 * pair + wg;
    const u32 own_stage = base + kKvOff + (own % kStages) * kTileBytes;
    mbar_wait(bar0 + 8 * (own % kStages), (own / kStages) & 1);
    // S^T over 36 k16 steps in batches of four (two ldmatrix.x4 each),
    // the next batch widened while this one runs.
    u32 frag[kBuffers][4][4];
    auto load_k = [&](int buf, int batch) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int slab = 2 * batch + h;  // 32 bytes: k16 steps 2 slab, 2 slab + 1
        u32 r[4];
        const u32 at = own_stage + k_row + (slab < 16 ? ((2 * slab) & ~7) * 16 + k_xor[slab % 4]
                                                      : 32 * 16 + k_rope_xor[slab - 16]);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at));
        u32(&f0)[4] = frag[buf][2 * h];
        u32(&f1)[4] = frag[buf][2 * h + 1];
#if K_CVT
        // The conversion unit instead of the integer pipes: bytes (0, 1)
        // and (2, 3) as pairs, exact (no / 256).
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          f0[i] = cvt_pair(static_cast<uint16_t>(r[i]));
          f0[2 + i] = cvt_pair(static_cast<uint16_t>(r[i] >> 16));
          f1[i] = cvt_pair(static_cast<uint16_t>(r[2 + i]));
          f1[2 + i] = cvt_pair(static_cast<uint16_t>(r[2 + i] >> 16));
        }
        continue;
#endif
        f0[0] = widen<0xA280>(r[0], 0);
        f0[1] = widen<0xA280>(r[1], 0);
        f0[2] = widen<0xB391>(r[0], 0);
        f0[3] = widen<0xB391>(r[1], 0);
        f1[0] = widen<0xA280>(r[2], 0);
        f1[1] = widen<0xA280>(r[3], 0);
        f1[2] = widen<0xB391>(r[2], 0);
        f1[3] = widen<0xB391>(r[3], 0);
      }
    };
    load_k(0, 0);
#pragma unroll
    for (int batch = 0; batch < 9; ++batch) {
      const int buf = batch % kBuffers;
      wg_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int step = 4 * batch + k;
        mma(s, frag[buf][k], q_desc + (((step / 4) * kQBlockBytes + (step % 4) * 32) >> 4), step > 0);
      }
      wg_commit();
      if (batch + 1 < 9) {
        wg_wait<kBuffers - 1>();  // batch + 1 - kBuffers is done: its buffer is free
        load_k((batch + 1) % kBuffers, batch + 1);
      }
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 24; ++i) asm volatile("" : "+f"(s[i])::"memory");

    // Softmax against the block's reference maxima; raised only past the slack.
    bool over = false;
#pragma unroll
    for (int j = 0; j < 6; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * j + e] *= p.scale_log2;
        s[4 * j + 2 + e] *= p.scale_log2;
        over |= fmaxf(s[4 * j + e], s[4 * j + 2 + e]) > m_ref[2 * j + e] + kSlack;
      }
    if (bar_or(1, over)) {
      // Each warp's maxima per head, then every thread takes the block's.
#pragma unroll
      for (int j = 0; j < 6; ++j)
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
      for (int j = 0; j < 6; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float mx = m_ref[2 * j + e];
          for (int w = 0; w < 8; ++w) mx = fmaxf(mx, scratch[w * kH + 8 * j + 2 * c4 + e]);
          const float f = m_ref[2 * j + e] == -INFINITY ? 0.0f : exp2f(m_ref[2 * j + e] - mx);
          m_ref[2 * j + e] = mx;
          l_run[2 * j + e] *= f;
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            o[m][4 * j + e] *= f;
            o[m][4 * j + 2 + e] *= f;
          }
        }
      bar_sync(2);  // scratch is read before anyone's next write
    }
    // P^T (f16) by stmatrix.trans: matrix (tokens 16 warp + 8 half, heads 8 j).
    const u32 p_own = base + kPOff + ((pair & 1) * 2 + wg) * kPBytes;
    {
      u32 packed[12];
#pragma unroll
      for (int j = 0; j < 6; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float a = exp2f(s[4 * j + 2 * half] - m_ref[2 * j]);
          const float b = exp2f(s[4 * j + 2 * half + 1] - m_ref[2 * j + 1]);
          l_run[2 * j] += a;
          l_run[2 * j + 1] += b;
          __half2 h2 = __floats2half2_rn(a, b);
          packed[2 * j + half] = *reinterpret_cast<u32*>(&h2);
        }
      // Matrix i of an x4 (lanes 8 i .. 8 i + 7 give its rows): matrices 4 x + i
      // = (j, half) = ((4 x + i) / 2, (4 x + i) % 2).
#pragma unroll
      for (int x = 0; x < 3; ++x) {
        const int mi = 4 * x + (lane >> 3);
        const int j = mi / 2, half = mi % 2;
        const int head = 8 * j + (lane & 7);
        const int chunk = 2 * warp + half;
        const u32 at = p_own + head * 128 + ((chunk ^ (head & 7)) << 4);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(at),
                     "r"(packed[4 * x]), "r"(packed[4 * x + 1]), "r"(packed[4 * x + 2]), "r"(packed[4 * x + 3])
                     : "memory");
      }
    }
    fence_async();
    bar_sync(3);

    // P V: both tiles of the pair, this warpgroup's 256 latents as four
    // m-blocks (m-block 2 q + b holds latents 4 word + b (rows g) and
    // 4 word + 2 + b... see the store), k16 steps of 16 tokens.
    auto load_v = [&](u32 (&f)[2][4], u32 stage, int q, int kk) {
      u32 w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const u32 at = stage + v_off[i & 1] + (16 * kk + 8 * (i >> 1)) * kD + 128 * q;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w[i]) : "r"(at));
      }
      // m-block 2 q: rows g / g + 8 = latents 4 word + 0 / + 1; 2 q + 1: + 2 / + 3.
      f[0][0] = widen<0xC480>(w[0], w[1]);
      f[0][1] = widen<0xD591>(w[0], w[1]);
      f[0][2] = widen<0xC480>(w[2], w[3]);
      f[0][3] = widen<0xD591>(w[2], w[3]);
      f[1][0] = widen<0xE6A2>(w[0], w[1]);
      f[1][1] = widen<0xF7B3>(w[0], w[1]);
      f[1][2] = widen<0xE6A2>(w[2], w[3]);
      f[1][3] = widen<0xF7B3>(w[2], w[3]);
    };
    // 16 load groups (2 tiles x 2 m-block pairs x 4 k16 steps), two per batch.
    u32 vf[kBuffers][2][2][4];  // [buffer][group in batch][m-block of the pair][reg]
    auto group_of = [&](int gi, int& tile_in_pair, int& q, int& kk) {
      tile_in_pair = gi >> 3;
      q = (gi >> 2) & 1;
      kk = gi & 3;
    };
    auto load_batch = [&](int buf, int batch) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int tp, q, kk;
        group_of(2 * batch + h, tp, q, kk);
        const int tile = 2 * pair + tp;
        load_v(vf[buf][h], base + kKvOff + (tile % kStages) * kTileBytes, q, kk);
      }
    };
    const int other = 2 * pair + (wg ^ 1);
    mbar_wait(bar0 + 8 * (other % kStages), (other / kStages) & 1);
    load_batch(0, 0);
#pragma unroll
    for (int batch = 0; batch < 8; ++batch) {
      const int buf = batch % kBuffers;
      wg_fence();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int tp, q, kk;
        group_of(2 * batch + h, tp, q, kk);
        const u64 desc = p_desc + ((((pair & 1) * 2 + tp) * kPBytes + kk * 32) >> 4);
        mma(o[2 * q], vf[buf][h][0], desc, 1);
        mma(o[2 * q + 1], vf[buf][h][1], desc, 1);
      }
      wg_commit();
      if (batch + 1 < 8) {
        wg_wait<kBuffers - 1>();
        load_batch((batch + 1) % kBuffers, batch + 1);
      }
    }
    wg_wait<0>();
#pragma unroll
    for (int m = 0; m < 4; ++m)
#pragma unroll
      for (int i = 0; i < 24; ++i) asm volatile("" : "+f"(o[m][i])::"memory");
    // This warpgroup's columns of both tiles are read: refill them with the
    // tiles four ahead (the other warpgroup's S^T of them ended before the
    // P^T barrier).
    // The warpgroup's other warps read these columns with ld.shared (V^T).
    asm volatile("bar.sync %0, 128;\n" ::"r"(4 + wg) : "memory");
    if (2 * pair + 4 < tiles) load_tile(2 * pair + 4, next0);
    if (2 * pair + 5 < tiles) load_tile(2 * pair + 5, next1);
  }

  // l: the thread's tokens, then the 8 g-lanes, then the block's 8 warps.
#pragma unroll
  for (int i = 0; i < 12; ++i) {
    float v = l_run[i];
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    l_run[i] = v;
  }
  bar_sync(2);
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < 6; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) scratch[(wg * 4 + warp) * kH + 8 * j + 2 * c4 + e] = l_run[2 * j + e];
  }
  bar_sync(2);
#pragma unroll
  for (int j = 0; j < 6; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float l = 0.0f;
      for (int w = 0; w < 8; ++w) l += scratch[w * kH + 8 * j + 2 * c4 + e];
      l_run[2 * j + e] = l;
    }
  // O^T rows to latents: m-block 2 q + b, row g (+ 8) is latent 4 word + 2 b (+ 1).
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int word = word0 + 32 * q;
#pragma unroll
    for (int j = 0; j < 6; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 8 * j + 2 * c4 + e;
        const float inv = 256.0f / l_run[2 * j + e];  // V's widening was / 256
        const float4 v = make_float4(o[2 * q][4 * j + e] * inv, o[2 * q][4 * j + 2 + e] * inv,
                                     o[2 * q + 1][4 * j + e] * inv, o[2 * q + 1][4 * j + 2 + e] * inv);
        *reinterpret_cast<float4*>(p.part_o + (static_cast<size_t>(item) * kH + head) * kDV + 4 * word) = v;
      }
  }
  if (wg == 0 && warp == 0 && g == 0) {
#pragma unroll
    for (int j = 0; j < 6; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 8 * j + 2 * c4 + e;
        p.part_ml[(static_cast<size_t>(item) * kH + head) * 2] = m_ref[2 * j + e];
        p.part_ml[(static_cast<size_t>(item) * kH + head) * 2 + 1] = l_run[2 * j + e];
      }
  }
}

// out[r][h] = the items' normalised outputs weighted by their l 2^(m - M).
__global__ void combine(const float* part_o, const float* part_ml, __nv_bfloat16* out) {
  const int rh = blockIdx.x, request = rh / kH, head = rh % kH;
  float m[kItemsPerRequest], l[kItemsPerRequest], mx = -INFINITY;
  for (int i = 0; i < kItemsPerRequest; ++i) {
    const size_t e = static_cast<size_t>(request * kItemsPerRequest + i) * kH + head;
    m[i] = part_ml[e * 2];
    l[i] = part_ml[e * 2 + 1];
    mx = fmaxf(mx, m[i]);
  }
  float w[kItemsPerRequest], total = 0.0f;
  for (int i = 0; i < kItemsPerRequest; ++i) {
    w[i] = l[i] * exp2f(m[i] - mx);
    total += w[i];
  }
  for (int c = threadIdx.x; c < kDV; c += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < kItemsPerRequest; ++i)
      acc += w[i] * part_o[(static_cast<size_t>(request * kItemsPerRequest + i) * kH + head) * kDV + c];
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
  const int pages = requests * pages_per_request;
  std::mt19937 rng(26);
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
  for (auto& x : q) x = __float2bfloat16(uni(rng));
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));

  unsigned char* d_pool;
  int* d_table;
  __nv_bfloat16 *d_q, *d_out;
  float *d_po, *d_pml;
  const int items = requests * kItemsPerRequest;
  CHECK(cudaMalloc(&d_pool, pool.size()));
  CHECK(cudaMalloc(&d_table, table.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_q, q.size() * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&d_out, static_cast<size_t>(requests) * kH * kDV * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&d_po, static_cast<size_t>(items) * kH * kDV * sizeof(float)));
  CHECK(cudaMalloc(&d_pml, static_cast<size_t>(items) * kH * 2 * sizeof(float)));
  CHECK(cudaMemcpy(d_pool, pool.data(), pool.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_table, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_q, q.data(), q.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_out, 0xff, static_cast<size_t>(requests) * kH * kDV * sizeof(__nv_bfloat16)));

  Params prm{d_pool, d_table, d_q, d_po, d_pml, pages_per_request,
             scale * 1.4426950408889634f * (K_CVT ? 1.0f : 256.0f)};
  CHECK(cudaFuncSetAttribute(swapped_fp8_decode, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  auto launch = [&]() {
    swapped_fp8_decode<<<items, kThreads, kSmemBytes>>>(prm);
    combine<<<requests * kH, 128>>>(d_po, d_pml, d_out);
  };
  launch();
  CHECK(cudaDeviceSynchronize());

  // Reference (double) for three requests, every head.
  std::vector<__nv_bfloat16> out(static_cast<size_t>(requests) * kH * kDV);
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  double err2 = 0.0, ref2 = 0.0;
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
      for (int c = 0; c < kDV; ++c) {
        const double ref = acc[c] / l;
        const double got = __bfloat162float(out[(static_cast<size_t>(r) * kH + h) * kDV + c]);
        finite = finite && std::isfinite(got);
        err2 += (got - ref) * (got - ref);
        ref2 += ref * ref;
      }
    }
  }
  std::printf("rel L2 %.3e (requests 0, %d, %d; all heads)%s\n", std::sqrt(err2 / ref2), requests / 2, requests - 1,
              finite ? "" : " NON-FINITE");

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
    swapped_fp8_decode<<<items, kThreads, kSmemBytes>>>(prm);
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

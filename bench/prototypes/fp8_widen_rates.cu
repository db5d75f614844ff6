// Rates behind a possible fp8 KV engine for case 10 (48 heads, fp8 e4m3 KV):
// tokens as wgmma's M and heads as its N (m64n48k16, no padding of 48 heads
// to 64 rows), with K (S^T = K Q^T) and V^T (O^T = V^T P^T) widened from
// fp8 in registers and fed as wgmma's A operand, so that no widened copy is
// written to shared memory. Whether that can beat the 0.6x bar (~198 us)
// depends on three rates this program measures per SM, in cycles of the SM
// clock (clock64), one block per SM:
//   1. e4m3 -> f16 widening by integer instructions (prmt, shift, and);
//      (a chain of cvt.rn.f16x2.e4m3x2 alone measured nothing: ptxas
//      dropped it, 203 cycles for 32 K conversions a thread; the fused
//      loops below convert for real);
//   2. wgmma m64n48k16 with A from registers against m64n256k16 (the rate
//      the bf16 engines run at), both warpgroups issuing;
//   3. the S^T loop itself: each k16 step's A widened from fp8 in shared
//      memory (ldmatrix of byte pairs, cvt) feeding m64n48k16;
//   4. the P V loop's V^T: four 4-byte loads of four tokens, prmt into
//      token pairs, cvt, feeding m64n48k16.
// Measured (one H200, session 26; per SM-cycle): integer widening 0.72
// pairs a cycle (with the chain's add: ~2.9 integer instructions a cycle);
// m64n48k16 RS 4089 FLOP (the 4096 peak), SS 3507 (shared memory bound),
// m64n256k16 RS 4093; the S^T loop 2743 FLOP with two warpgroups, 3292 with
// three; the V^T loop 2325 and 2836. bench/prototypes/swapped_fp8_rs.cu
// built the engine these rates priced at ~200 us for case 10: it ran 362.
// Build and run alone on an H200:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o rates fp8_widen_rates.cu && ./rates
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

namespace {
using u32 = uint32_t;
using u64 = uint64_t;
constexpr int kIters = 4096;

__device__ __forceinline__ u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// Cycles of the block between two block-wide barriers, from thread 0.
struct BlockClock {
  long long start;
  __device__ void begin() {
    __syncthreads();
    start = clock64();
  }
  __device__ void end(long long* cycles) {
    __syncthreads();
    if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
  }
};

__device__ __forceinline__ u32 cvt_e4m3x2(uint16_t x) {
  u32 d;
  asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"(x));
  return d;
}

// Exact e4m3 -> f16 (times 2^-8) for bytes 0 and 2 of x: sign-extend each
// into its half (prmt), shift the 7 magnitude bits to f16's exponent and
// mantissa, clear what the shift brought in. Three instructions, two values.
__device__ __forceinline__ u32 widen_int(u32 x) {
  u32 y;
  asm volatile("prmt.b32 %0, %1, 0, 0xA280;\n" : "=r"(y) : "r"(x));
  return (y << 7) & 0xBF80BF80u;
}

__global__ void int_rate(long long* cycles, u32* sink, u32 seed) {
  BlockClock clock;
  u32 v[8];
  for (int c = 0; c < 8; ++c) v[c] = seed * (threadIdx.x + 1) + c;
  clock.begin();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < 8; ++c) v[c] = widen_int(v[c] + 1u);
  }
  clock.end(cycles);
  u32 acc = 0;
  for (int c = 0; c < 8; ++c) acc ^= v[c];
  if (acc == 0x12345u) sink[threadIdx.x] = acc;
}

// wgmma wrappers (bf16 inputs would be the same rate; f16 is what e4m3
// widens to exactly).
__device__ __forceinline__ u64 smem_desc(const void* p) {
  return static_cast<u64>((smem_addr(p) & 0x3FFFFu) >> 4) | static_cast<u64>(1) << 16 |
         static_cast<u64>(1024 >> 4) << 32 | static_cast<u64>(1) << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#define D24_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}"
#define D24_OPS(d)                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])

__device__ __forceinline__ void mma_n48_rs(float (&d)[24], const u32 (&a)[4], u64 desc_b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 " D24_TEXT
               ", {%24,%25,%26,%27}, %28, p, 1, 1, 0;\n}\n"
               : D24_OPS(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void mma_n48_ss(float (&d)[24], u64 desc_a, u64 desc_b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 " D24_TEXT
               ", %24, %25, p, 1, 1, 0, 0;\n}\n"
               : D24_OPS(d)
               : "l"(desc_a), "l"(desc_b));
}

#define D128_TEXT                                                                                                   \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
  "%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"    \
  "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,"    \
  "%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,"  \
  "%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define D8_OPS(d, i)                                                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define D128_OPS(d)                                                                                             \
  D8_OPS(d, 0), D8_OPS(d, 8), D8_OPS(d, 16), D8_OPS(d, 24), D8_OPS(d, 32), D8_OPS(d, 40), D8_OPS(d, 48),       \
      D8_OPS(d, 56), D8_OPS(d, 64), D8_OPS(d, 72), D8_OPS(d, 80), D8_OPS(d, 88), D8_OPS(d, 96), D8_OPS(d, 104), \
      D8_OPS(d, 112), D8_OPS(d, 120)

__device__ __forceinline__ void mma_n256_rs(float (&d)[128], const u32 (&a)[4], u64 desc_b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " D128_TEXT
               ", {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
               : D128_OPS(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

constexpr int kSmemBytes = 64 * 1024;

// Every warpgroup of the block issues groups of 8 wgmmas on one
// accumulator, keeping one group in flight while it issues the next.
template <int KIND>  // 0: m64n48k16 RS, 1: m64n48k16 SS, 2: m64n256k16 RS
__global__ void mma_rate(long long* cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += blockDim.x) reinterpret_cast<u32*>(smem)[i] = 0x3c003c00u ^ i;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  const u64 desc = smem_desc(smem + (threadIdx.x >> 7) * 16384);
  u32 a[4] = {0x3c003c00u, 0x3c003c00u ^ threadIdx.x, 0x3c00u, 0x3c000000u};
  constexpr int kAcc = KIND == 2 ? 128 : 24;
  float d[kAcc];
  for (int i = 0; i < kAcc; ++i) d[i] = 0.0f;
  BlockClock clock;
  clock.begin();
  constexpr int kGroups = KIND == 2 ? kIters / 32 : kIters / 8;
  for (int it = 0; it < kGroups; ++it) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if constexpr (KIND == 0) {
        mma_n48_rs(reinterpret_cast<float(&)[24]>(d), a, desc + 2 * k);
      } else if constexpr (KIND == 1) {
        mma_n48_ss(reinterpret_cast<float(&)[24]>(d), desc + 64 * 8 + 2 * k, desc + 2 * k);
      } else {
        mma_n256_rs(reinterpret_cast<float(&)[128]>(d), a, desc + 2 * k);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  clock.end(cycles);
  float acc = 0.0f;
  for (int i = 0; i < kAcc; ++i) acc += d[i];
  if (acc == 1.2345f) sink[threadIdx.x] = acc;
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ u32 lo16_cvt(u32 x) { return cvt_e4m3x2(static_cast<uint16_t>(x)); }
__device__ __forceinline__ u32 hi16_cvt(u32 x) { return cvt_e4m3x2(static_cast<uint16_t>(x >> 16)); }

// The S^T loop: a 64-token fp8 K tile read as A in
// batches of four k16 steps; batch b + 1 is loaded and widened while batch
// b's wgmmas run. KIND 0: A by ldmatrix + cvt; 1: the same with the
// V^T pattern (four 4-byte loads of four tokens, prmt into token pairs).
template <int KIND>
__global__ void widen_mma_rate(long long* cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += blockDim.x) reinterpret_cast<u32*>(smem)[i] = 0x38303830u ^ (i & 0x0f0f0f0f);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const u64 desc_q = smem_desc(smem + 48 * 1024);  // Q^T slice: B of every step
  // Warpgroup wg's K tile at 8 KB wg (the tiles overlap; only the rate
  // matters). Token rows 272 bytes apart keep ldmatrix's eight rows on
  // distinct 16-byte bank groups; 264 keeps the V^T loads' four tokens on
  // distinct banks.
  const u32 tile = smem_addr(smem) + wg * 8192;
  constexpr u32 kRow = KIND == 0 ? 272 : 264;
  // ldmatrix: lanes 0-7 rows 0-7 bytes 0-15, 8-15 rows 8-15, 16-23 rows 0-7
  // bytes 16-31, 24-31 rows 8-15 bytes 16-31 of this warp's 16 token rows.
  const u32 ld_row = tile + (warp * 16 + (lane & 15)) * kRow + (lane >> 4) * 16;
  float d[24];
  for (int i = 0; i < 24; ++i) d[i] = 0.0f;
  u32 frag[2][4][4];
  // Batch `b` (k16 steps 4b .. 4b+3) into buffer `buf`.
  auto load = [&](int buf, int b) {
    if constexpr (KIND == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // two ldmatrix.x4, each two k16 steps
        u32 r[4];
        ldmatrix_x4(r, ld_row + ((2 * b + h) & 7) * 32);
        u32(&f0)[4] = frag[buf][2 * h];
        u32(&f1)[4] = frag[buf][2 * h + 1];
        f0[0] = lo16_cvt(r[0]);
        f0[1] = lo16_cvt(r[1]);
        f0[2] = hi16_cvt(r[0]);
        f0[3] = hi16_cvt(r[1]);
        f1[0] = lo16_cvt(r[2]);
        f1[1] = lo16_cvt(r[3]);
        f1[2] = hi16_cvt(r[2]);
        f1[3] = hi16_cvt(r[3]);
      }
    } else {
      // Two fragments from four tokens' 4-byte words (latents 4c .. 4c+3).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 w[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const u32 at = tile + (16 * (b & 3) + 4 * (lane & 3) + t) * kRow + (warp * 8 + (lane >> 2)) * 4 + h * 128;
          asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w[t]) : "r"(at));
        }
        // Token pairs of one latent: (t0, t1) and (t2, t3) for latents 0..3.
        u32 p01[2], p23[2];
        asm volatile("prmt.b32 %0, %1, %2, 0x5140;\n" : "=r"(p01[0]) : "r"(w[0]), "r"(w[1]));
        asm volatile("prmt.b32 %0, %1, %2, 0x7362;\n" : "=r"(p01[1]) : "r"(w[0]), "r"(w[1]));
        asm volatile("prmt.b32 %0, %1, %2, 0x5140;\n" : "=r"(p23[0]) : "r"(w[2]), "r"(w[3]));
        asm volatile("prmt.b32 %0, %1, %2, 0x7362;\n" : "=r"(p23[1]) : "r"(w[2]), "r"(w[3]));
        u32(&f0)[4] = frag[buf][2 * h];
        u32(&f1)[4] = frag[buf][2 * h + 1];
        f0[0] = lo16_cvt(p01[0]);
        f0[1] = hi16_cvt(p01[0]);
        f0[2] = lo16_cvt(p23[0]);
        f0[3] = hi16_cvt(p23[0]);
        f1[0] = lo16_cvt(p01[1]);
        f1[1] = hi16_cvt(p01[1]);
        f1[2] = lo16_cvt(p23[1]);
        f1[3] = hi16_cvt(p23[1]);
      }
    }
  };
  BlockClock clock;
  clock.begin();
  constexpr int kBatches = kIters / 4;
  load(0, 0);
  for (int b = 0; b < kBatches; b += 2) {
#pragma unroll
    for (int buf = 0; buf < 2; ++buf) {
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) mma_n48_rs(d, frag[buf][k], desc_q + 2 * k);
      wgmma_commit();
      wgmma_wait<1>();  // the other buffer's wgmmas are done: refill it
      load(buf ^ 1, b + buf + 1);
    }
  }
  wgmma_wait<0>();
  clock.end(cycles);
  float acc = 0.0f;
  for (int i = 0; i < 24; ++i) acc += d[i];
  if (acc == 1.2345f) sink[threadIdx.x] = acc;
}

double median_cycles(long long* dev, int blocks) {
  static long long host[1024];
  cudaMemcpy(host, dev, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
  for (int i = 1; i < blocks; ++i)
    for (int j = i; j > 0 && host[j - 1] > host[j]; --j) {
      const long long t = host[j];
      host[j] = host[j - 1];
      host[j - 1] = t;
    }
  return static_cast<double>(host[blocks / 2]);
}
}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* cycles;
  u32* sink;
  cudaMalloc(&cycles, 1024 * sizeof(long long));
  cudaMalloc(&sink, 4096 * sizeof(u32));
  auto report = [&](const char* what, double per_block_units, const char* unit) {
    const cudaError_t e = cudaDeviceSynchronize();
    const double c = median_cycles(cycles, sms);
    std::printf("%-58s %10.0f cycles  %8.3f %s per SM-cycle  (%s)\n", what, c, per_block_units / c, unit,
                cudaGetErrorString(e));
  };
  for (int threads : {256, 512, 1024}) {
    char label[96];
    int_rate<<<sms, threads>>>(cycles, sink, 7);
    int_rate<<<sms, threads>>>(cycles, sink, 7);
    std::snprintf(label, sizeof label, "int widening (prmt, shl, and + add), %d threads", threads);
    report(label, threads / 32.0 * 8 * kIters, "warp widenings (2 values)");
  }
  cudaFuncSetAttribute(mma_rate<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  cudaFuncSetAttribute(mma_rate<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  cudaFuncSetAttribute(mma_rate<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  cudaFuncSetAttribute(widen_mma_rate<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  cudaFuncSetAttribute(widen_mma_rate<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  for (int wgs : {2, 3}) {
    const int threads = 128 * wgs;
    char label[96];
    mma_rate<0><<<sms, threads, kSmemBytes>>>(cycles, reinterpret_cast<float*>(sink));
    mma_rate<0><<<sms, threads, kSmemBytes>>>(cycles, reinterpret_cast<float*>(sink));
    std::snprintf(label, sizeof label, "wgmma m64n48k16 RS, %d warpgroups", wgs);
    report(label, 64.0 * 48 * 16 * 2 * wgs * kIters, "FLOP");
    mma_rate<1><<<sms, threads, kSmemBytes>>>(cycles, reinterpret_cast<float*>(sink));
    std::snprintf(label, sizeof label, "wgmma m64n48k16 SS, %d warpgroups", wgs);
    report(label, 64.0 * 48 * 16 * 2 * wgs * kIters, "FLOP");
    mma_rate<2><<<sms, threads, kSmemBytes>>>(cycles, reinterpret_cast<float*>(sink));
    std::snprintf(label, sizeof label, "wgmma m64n256k16 RS, %d warpgroups", wgs);
    report(label, 64.0 * 256 * 16 * 2 * wgs * (kIters / 4), "FLOP");
    widen_mma_rate<0><<<sms, threads, kSmemBytes>>>(cycles, reinterpret_cast<float*>(sink));
    std::snprintf(label, sizeof label, "S^T: ldmatrix + cvt + m64n48k16 RS, %d warpgroups", wgs);
    report(label, 64.0 * 48 * 16 * 2 * wgs * kIters, "FLOP");
    widen_mma_rate<1><<<sms, threads, kSmemBytes>>>(cycles, reinterpret_cast<float*>(sink));
    std::snprintf(label, sizeof label, "V^T: ld + prmt + cvt + m64n48k16 RS, %d warpgroups", wgs);
    report(label, 64.0 * 48 * 16 * 2 * wgs * kIters, "FLOP");
  }
  std::printf("(4096 FLOP per SM-cycle is the dense f16 peak; an m64n48k16 at that rate takes 24 cycles)\n");
  return 0;
}

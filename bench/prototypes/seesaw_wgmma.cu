// Prototype, not part of the library (bench/RESULTS.md, session 25): the
// 64-row bf16 MLA decode loop laid out as FlashMLA lays out its Hopper
// kernel, measured before the tensor-core backend's wgmma engine is
// rewritten to it. Question: how much of case 1's gap to FlashMLA (328 us
// against 240) is the engine's layout?
//
// The library's engine splits each 32-token tile's S between its two
// warpgroups by the reduction (576 = 2 x 288), swaps the partial sums
// through shared memory behind a block barrier, and both warpgroups run the
// same softmax. Here, as in FlashMLA, warpgroup 0 owns the even 64-token
// tiles and warpgroup 1 the odd ones: each computes its tile's whole S
// (m64n64k16, Q and K from shared memory), runs its softmax, and hands P
// to the other through shared memory; each owns 256 of the 512 output
// columns and multiplies both tiles' P into them (its own P from registers,
// the other's from shared memory). The running maximum passes from one
// warpgroup to the other through shared memory, so their softmaxes
// alternate and one warpgroup's matrix steps run during the other's
// softmax. Tiles arrive by TMA (a tensor map over the pool, one 64 x 64
// box per 64-column block and page, an mbarrier each); a block's two KV
// buffers are refilled part by part as each part's last reader finishes.
// Each warpgroup's P lives in the 64-column rope block of its own tile's
// buffer (S is done with it), so Q, two tiles and both Ps take 216 KB.
//
// Simplified against the library: page size 64, kv_len a multiple of 128
// per split (no masking, even tile count), exact rescaling, no stats.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a seesaw_wgmma.cu -o seesaw -lcuda
//   ./seesaw REQUESTS KV_LEN HEADS SPLITS [VERIFY=1] [ITERS=50]
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
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

typedef unsigned u32;
typedef unsigned long long u64;

constexpr int kD = 576, kDV = 512, kT = 64, kM = 64;
constexpr int kBlocks = kD / 64;          // 64-column blocks of a row: 9
constexpr int kBlockBytes = kT * 128;     // one block of a tile (and of Q): 8 KB
constexpr int kTileBytes = kBlocks * kBlockBytes;
constexpr int kRopeBlock = kBlocks - 1;   // where each warpgroup's P lives
// Shared memory: Q, two KV buffers, 18 mbarriers, row state.
constexpr int kQOff = 0;
constexpr int kKvOff = kTileBytes;
constexpr int kBarOff = 3 * kTileBytes;
constexpr int kRowOff = kBarOff + 2 * kBlocks * 8;
constexpr int kSmemBytes = kRowOff + 5 * kM * 4 + 1024;  // + alignment slack
// Named barriers between the warpgroups (id 0 is __syncthreads).
constexpr int kScale0Ready = 1, kScale1Ready = 2, kP0Ready = 3, kP1Issued = 4;

// COPY_CPASYNC=1: each part's copies are issued by all 128 threads of the
// warpgroup that frees it (16-byte cp.async, completing on the part's
// mbarriers through cp.async.mbarrier.arrive), instead of TMA boxes.
#ifndef COPY_CPASYNC
#define COPY_CPASYNC 0
#endif
constexpr int kBarrierCount = COPY_CPASYNC ? 128 : 1;

struct Params {
  const __nv_bfloat16* q;   // [B][H][576]
  const __nv_bfloat16* pool;  // [pages][64][576]
  const int* page_table;    // [B][max_pages]
  int heads, row_tiles, max_pages, kv_len, splits;
  float scale_log2;         // softmax scale * log2(e)
  __nv_bfloat16* out;       // [B][H][512] (splits == 1)
  float* part_o;            // [B][splits][H][512], normalised
  float* part_lse;          // [B][splits][H], log2 units
};

__device__ __forceinline__ u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

__device__ __forceinline__ void mbar_init(u32 bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "n"(kBarrierCount) : "memory");
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
// One 64 x 64 box (columns 64 block .. +64 of the page's 64 rows) into `dst`,
// completing on `bar`, which this call arms.
__device__ __forceinline__ void tma_block(const CUtensorMap* map, void* dst, u32 bar, int block, int page) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "n"(kBlockBytes) : "memory");
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(64 * block), "r"(kT * page), "r"(bar)
      : "memory");
}

__device__ __forceinline__ u64 smem_desc(const void* p, u32 leading_bytes, u32 stride_bytes) {
  return static_cast<u64>((smem_addr(p) & 0x3FFFFu) >> 4) | static_cast<u64>((leading_bytes & 0x3FFFFu) >> 4) << 16 |
         static_cast<u64>((stride_bytes & 0x3FFFFu) >> 4) << 32 | static_cast<u64>(1) << 62;
}
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ u64 launder(u64 x) {
  asm volatile("" : "+l"(x));
  return x;
}
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

#define D32_TEXT                                                                                              \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28," \
  "%29,%30,%31}"
#define D32_OPERANDS(d)                                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// S: D[64 x 64] (+)= A[64 x 16] B[64 x 16]^T, both K-major in shared memory.
__device__ __forceinline__ void wgmma_s(float (&d)[32], u64 da, u64 db, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " D32_TEXT ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : D32_OPERANDS(d)
               : "l"(da), "l"(db), "r"(accumulate));
}

#define D128_TEXT                                                                                                 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"  \
  "%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55," \
  "%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82," \
  "%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,"  \
  "%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define D8(d, i)                                                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define D128_OPERANDS(d)                                                                                        \
  D8(d, 0), D8(d, 8), D8(d, 16), D8(d, 24), D8(d, 32), D8(d, 40), D8(d, 48), D8(d, 56), D8(d, 64), D8(d, 72), \
      D8(d, 80), D8(d, 88), D8(d, 96), D8(d, 104), D8(d, 112), D8(d, 120)
// O half: D[64 x 256] += P[64 x 16] V[16 x 256]; P from registers, V N-major in shared memory.
__device__ __forceinline__ void wgmma_pv_rs(float (&d)[128], const u32 (&a)[4], u64 db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " D128_TEXT
               ", {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
               : D128_OPERANDS(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// The same with P K-major in shared memory.
__device__ __forceinline__ void wgmma_pv_ss(float (&d)[128], u64 da, u64 db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " D128_TEXT ", %128, %129, p, 1, 1, 0, 1;\n}\n"
               : D128_OPERANDS(d)
               : "l"(da), "l"(db));
}

__global__ void __launch_bounds__(256, 1) seesaw_kernel(const __grid_constant__ CUtensorMap kv_map, Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* q_s = smem + kQOff;
  auto kv_s = [&](int buf) { return smem + kKvOff + buf * kTileBytes; };
  const u32 bar0 = smem_addr(smem + kBarOff);  // [buffer][block], 8 bytes each
  auto bar = [&](int buf, int block) { return bar0 + 8 * (buf * kBlocks + block); };
  float* m_s = reinterpret_cast<float*>(smem + kRowOff);  // running maximum (log2 units)
  float* scale0_s = m_s + kM;
  float* scale1_s = m_s + 2 * kM;
  float* l_s = m_s + 3 * kM;  // [warpgroup][row]

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int warp = (tid >> 5) & 3;
  const int lane = tid & 31;
  const int g = lane >> 2, c4 = lane & 3;
  const int row_lo = warp * 16 + g, row_hi = row_lo + 8;

  const int item = blockIdx.x;
  const int split = item % p.splits;
  const int rt = (item / p.splits) % p.row_tiles;
  const int b = item / (p.splits * p.row_tiles);
  const int split_tokens = p.kv_len / p.splits;
  const int tile0 = split * split_tokens / kT;
  const int pairs = split_tokens / (2 * kT);
  const int* pages = p.page_table + b * p.max_pages + tile0;

  if (tid == 0) {
    for (int i = 0; i < 2 * kBlocks; ++i) mbar_init(bar0 + 8 * i);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (tid < kM) m_s[tid] = -INFINITY;
  // Q rows past the heads are zero: finite S, never stored.
  for (int i = tid; i < kM * (kD / 8); i += 256) {
    const int r = i / (kD / 8), c = i % (kD / 8);
    const int h = rt * kM + r;
    const bool valid = h < p.heads;
    const __nv_bfloat16* src = p.q + (static_cast<long long>(b) * p.heads + (valid ? h : 0)) * kD + 8 * c;
    cp_async_16(q_s + (c >> 3) * kBlockBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4), src, valid);
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  fence_proxy_async();
  __syncthreads();

  const unsigned char* my_kv = kv_s(wg);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float s[32];
  u32 pa[4][4];
  float l_lo = 0.0f, l_hi = 0.0f;

  // Descriptors are linear in the address: each step adds a constant to a
  // base computed once, so ptxas keeps no descriptor per step.
  const u64 q_desc_base = smem_desc(q_s, 16, 1024);
  const u64 k_desc_base = smem_desc(my_kv, 16, 1024);
  const u64 v_desc0 = smem_desc(kv_s(0) + 4 * wg * kBlockBytes, kBlockBytes, 1024);
  const u64 p_desc0 = smem_desc(kv_s(0) + kRopeBlock * kBlockBytes, 16, 1024);
  // S of this warpgroup's tile in buffer wg over blocks [first, last), one
  // commit group per block, each behind its block's mbarrier.
  auto issue_s = [&](int first, int last, u32 parity, bool fresh) {
    // Fresh bases each call: hoisted out of the loop, the 72 descriptors
    // of a tile would take 144 registers.
    const u64 q_desc = launder(q_desc_base), k_desc = launder(k_desc_base);
#pragma unroll
    for (int k = first; k < last; ++k) {
      mbar_wait(bar(wg, k), parity);
      if (COPY_CPASYNC) fence_proxy_async();  // cp.async writes, read next by wgmma
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u64 step = static_cast<u64>((k * kBlockBytes + kk * 32) >> 4);
        wgmma_s(s, q_desc + step, k_desc + step, (fresh && k == first && kk == 0) ? 0 : 1);
      }
      wgmma_commit();
    }
  };
  // O += P V over 64 tokens of buffer `buf`, this warpgroup's 256 columns.
  auto v_desc = [&](int buf, int kk) {
    return v_desc0 + static_cast<u64>((buf * kTileBytes + kk * 16 * 128) >> 4);
  };
  auto issue_pv_local = [&]() {
    pin(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_pv_rs(o, pa[kk], v_desc(wg, kk));
    wgmma_commit();
  };
  auto issue_pv_remote = [&]() {
    pin(o);
    wgmma_fence();
    const u64 p_desc = p_desc0 + static_cast<u64>(((wg ^ 1) * kTileBytes) >> 4);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_pv_ss(o, p_desc + static_cast<u64>(kk * 2), v_desc(wg ^ 1, kk));
    wgmma_commit();
  };
  // P (times f per row) as bf16 into this warpgroup's rope block, K-major
  // swizzled, from its A fragments (so S's registers are free once P is made).
  auto store_p = [&](float f_lo, float f_hi) {
    unsigned char* dst = kv_s(wg) + kRopeBlock * kBlockBytes;
    auto scaled = [](u32 v, float f) {
      if (f == 1.0f) return v;
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
      return pack_bf16(x.x * f, x.y * f);
    };
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // 8-token groups 2 kk + h
        const int j = 2 * kk + h;
        *reinterpret_cast<u32*>(dst + row_lo * 128 + ((j ^ (row_lo & 7)) << 4) + 4 * c4) = scaled(pa[kk][2 * h], f_lo);
        *reinterpret_cast<u32*>(dst + row_hi * 128 + ((j ^ (row_hi & 7)) << 4) + 4 * c4) =
            scaled(pa[kk][2 * h + 1], f_hi);
      }
    }
  };
  // Softmax of S in place (P in float), P's A fragments, and the rows'
  // old-to-new factors; `m_s` moves to the new maxima.
  auto softmax = [&](float& f_lo, float& f_hi) {
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
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
    f_lo = fast_exp2(old_lo - new_lo);
    f_hi = fast_exp2(old_hi - new_hi);
    __syncwarp();
    if (c4 == 0) {
      m_s[row_lo] = new_lo;
      m_s[row_hi] = new_hi;
    }
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * j + e] = fast_exp2(fmaf(s[4 * j + e], p.scale_log2, -new_lo));
        s[4 * j + 2 + e] = fast_exp2(fmaf(s[4 * j + 2 + e], p.scale_log2, -new_hi));
        sum_lo += s[4 * j + e];
        sum_hi += s[4 * j + 2 + e];
      }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) pa[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    return make_float2(sum_lo, sum_hi);
  };
  auto scale_o = [&](float f_lo, float f_hi) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= f_lo;
      o[4 * j + 1] *= f_lo;
      o[4 * j + 2] *= f_hi;
      o[4 * j + 3] *= f_hi;
    }
  };
  const bool issuer = (tid & 127) == 0;
  // Blocks [first, last) of buffer `buf` (and `extra`, if any) from `page`,
  // by the calling warpgroup; every part always has the same issuer.
  auto load_part = [&](int buf, int first, int last, int extra, int page) {
#if COPY_CPASYNC
    const int t = tid & 127;
    const __nv_bfloat16* src = p.pool + static_cast<long long>(page) * kT * kD + 8 * (t & 7);
    auto one = [&](int k) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int r = (t >> 3) + 16 * u;
        cp_async_16(kv_s(buf) + k * kBlockBytes + r * 128 + (((t & 7) ^ (r & 7)) << 4), src + r * kD + 64 * k, true);
      }
    };
    for (int k = first; k < last; ++k) one(k);
    if (extra >= 0) one(extra);
    for (int k = first; k < last; ++k) cp_async_arrive(bar(buf, k));
    if (extra >= 0) cp_async_arrive(bar(buf, extra));
#else
    if (issuer) {
      for (int k = first; k < last; ++k) tma_block(&kv_map, kv_s(buf) + k * kBlockBytes, bar(buf, k), k, page);
      if (extra >= 0) tma_block(&kv_map, kv_s(buf) + extra * kBlockBytes, bar(buf, extra), extra, page);
    }
#endif
  };
  if (wg == 0) {
    load_part(0, 0, 4, -1, pages[0]);
    load_part(1, 0, 4, kRopeBlock, pages[1]);
  } else {
    load_part(1, 4, 8, -1, pages[1]);
    load_part(0, 4, kBlocks, -1, pages[0]);
  }

  issue_s(0, kBlocks, 0, true);
  wgmma_wait<0>();
  pin(s);

  for (int i = 0; i < pairs; ++i) {
    const bool last = i + 1 == pairs;
    const u32 next_parity = (i + 1) & 1;
    const int page_next0 = last ? 0 : pages[2 * i + 2];
    const int page_next1 = last ? 0 : pages[2 * i + 3];
    if (wg == 0) {
      float f_lo, f_hi;
      const float2 sum = softmax(f_lo, f_hi);
      scale0_s[row_lo] = f_lo;  // every thread of the quad writes the same value
      scale0_s[row_hi] = f_hi;
      scale_o(f_lo, f_hi);
      l_lo = l_lo * f_lo + sum.x;
      l_hi = l_hi * f_hi + sum.y;
      bar_arrive(kScale0Ready);
      issue_pv_local();
      wgmma_wait<0>();
      pin(o);
      bar_sync(kScale1Ready);
      // Blocks 0-3 of buffer 0 (V's left half) are read by nobody else.
      if (!last) load_part(0, 0, 4, -1, page_next0);
      const float g_lo = scale1_s[row_lo], g_hi = scale1_s[row_hi];
      store_p(g_lo, g_hi);
      fence_proxy_async();
      bar_arrive(kP0Ready);
      bar_sync(kP1Issued);
      scale_o(g_lo, g_hi);
      l_lo *= g_lo;
      l_hi *= g_hi;
      issue_pv_remote();
      if (!last) {
        issue_s(0, 4, next_parity, true);
        wgmma_wait<4>();  // P1 V1L done: buffer 1's left half and P1's block are free
        load_part(1, 0, 4, kRopeBlock, page_next1);
        issue_s(4, kBlocks, next_parity, false);
      }
      wgmma_wait<0>();
      pin(o);
      pin(s);
    } else {
      bar_sync(kScale0Ready);
      float f_lo, f_hi;
      const float2 sum = softmax(f_lo, f_hi);
      scale1_s[row_lo] = f_lo;
      scale1_s[row_hi] = f_hi;
      const float h_lo = f_lo * scale0_s[row_lo], h_hi = f_hi * scale0_s[row_hi];
      bar_arrive(kScale1Ready);
      scale_o(h_lo, h_hi);
      l_lo = l_lo * h_lo + sum.x;
      l_hi = l_hi * h_hi + sum.y;
      store_p(1.0f, 1.0f);
      issue_pv_local();
      fence_proxy_async();
      bar_sync(kP0Ready);
      issue_pv_remote();
      bar_arrive(kP1Issued);
      if (!last) {
        wgmma_wait<1>();  // P1 V1R done: buffer 1's right half is free
        load_part(1, 4, 8, -1, page_next1);
        wgmma_wait<0>();  // P0 V0R done: buffer 0's right half and P0's block are free
        load_part(0, 4, kBlocks, -1, page_next0);
        issue_s(0, kBlocks, next_parity, true);
      }
      wgmma_wait<0>();
      pin(o);
      pin(s);
    }
  }

  // l: the quad's partial sums, then both warpgroups' (each holds its own tiles').
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  if (c4 == 0) {
    l_s[wg * kM + row_lo] = l_lo;
    l_s[wg * kM + row_hi] = l_hi;
  }
  __syncthreads();
  const float lt_lo = l_s[row_lo] + l_s[kM + row_lo];
  const float lt_hi = l_s[row_hi] + l_s[kM + row_hi];
  const int h_lo = rt * kM + row_lo, h_hi = rt * kM + row_hi;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = half ? h_hi : h_lo;
    if (h >= p.heads) continue;
    const float inv = 1.0f / (half ? lt_hi : lt_lo);
    const long long row = static_cast<long long>(b) * p.heads + h;
    if (p.splits == 1) {
      __nv_bfloat16* dst = p.out + row * kDV + 256 * wg + 2 * c4;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<u32*>(dst + 8 * j) = pack_bf16(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
    } else {
      const long long prow = (static_cast<long long>(b) * p.splits + split) * p.heads + h;
      float* dst = p.part_o + prow * kDV + 256 * wg + 2 * c4;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
      if (wg == 0 && c4 == 0) p.part_lse[prow] = m_s[half ? row_hi : row_lo] + log2f(half ? lt_hi : lt_lo);
    }
  }
}

// One block per (request, head): the splits' partials weighted by their lse.
__global__ void combine_kernel(Params p) {
  const int b = blockIdx.y, h = blockIdx.x;
  float m = -INFINITY;
  for (int s = 0; s < p.splits; ++s) m = fmaxf(m, p.part_lse[(static_cast<long long>(b) * p.splits + s) * p.heads + h]);
  float wsum = 0.0f;
  for (int s = 0; s < p.splits; ++s) wsum += exp2f(p.part_lse[(static_cast<long long>(b) * p.splits + s) * p.heads + h] - m);
  for (int d = threadIdx.x; d < kDV; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const long long prow = (static_cast<long long>(b) * p.splits + s) * p.heads + h;
      acc += exp2f(p.part_lse[prow] - m) * p.part_o[prow * kDV + d];
    }
    p.out[(static_cast<long long>(b) * p.heads + h) * kDV + d] = __float2bfloat16(acc / wsum);
  }
}

// Float reference: one block per (head, request).
__global__ void reference_kernel(Params p, const __nv_bfloat16* pool, float* ref) {
  extern __shared__ float sh[];
  float* q = sh;        // 576
  float* sc = sh + kD;  // kv_len
  __shared__ float red[32];
  const int b = blockIdx.y, h = blockIdx.x;
  for (int d = threadIdx.x; d < kD; d += blockDim.x)
    q[d] = __bfloat162float(p.q[(static_cast<long long>(b) * p.heads + h) * kD + d]);
  __syncthreads();
  auto row = [&](int j) {
    const int page = p.page_table[b * p.max_pages + j / kT];
    return pool + (static_cast<long long>(page) * kT + j % kT) * kD;
  };
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < p.kv_len; j += blockDim.x) {
    const __nv_bfloat16* k = row(j);
    float acc = 0.0f;
    for (int d = 0; d < kD; ++d) acc += q[d] * __bfloat162float(k[d]);
    sc[j] = acc * p.scale_log2;
    mx = fmaxf(mx, sc[j]);
  }
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float l = 0.0f;
  for (int j = threadIdx.x; j < p.kv_len; j += blockDim.x) {
    sc[j] = exp2f(sc[j] - mx);
    l += sc[j];
  }
  for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = l;
  __syncthreads();
  l = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) l += red[w];
  for (int d = threadIdx.x; d < kDV; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < p.kv_len; ++j) acc += sc[j] * __bfloat162float(row(j)[d]);
    ref[(static_cast<long long>(b) * p.heads + h) * kDV + d] = acc / l;
  }
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main(int argc, char** argv) {
  if (argc < 5) {
    std::printf("usage: %s REQUESTS KV_LEN HEADS SPLITS [VERIFY=1] [ITERS=50]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), kv_len = std::atoi(argv[2]), H = std::atoi(argv[3]), splits = std::atoi(argv[4]);
  const bool verify = argc > 5 ? std::atoi(argv[5]) != 0 : true;
  const int iters = argc > 6 ? std::atoi(argv[6]) : 50;
  if (kv_len % (2 * kT * splits) != 0) {
    std::printf("kv_len must be a multiple of %d per split\n", 2 * kT);
    return 2;
  }
  const int max_pages = kv_len / kT;
  const long long n_pages = static_cast<long long>(B) * max_pages;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> h_pool(n_pages * kT * kD), h_q(static_cast<size_t>(B) * H * kD);
  for (auto& x : h_pool) x = __float2bfloat16(uni(rng));
  for (auto& x : h_q) x = __float2bfloat16(uni(rng));
  std::vector<int> h_pt(n_pages);
  for (long long i = 0; i < n_pages; ++i) h_pt[i] = static_cast<int>(i);
  std::shuffle(h_pt.begin(), h_pt.end(), rng);

  __nv_bfloat16 *d_pool, *d_q, *d_out;
  int* d_pt;
  float *d_part_o = nullptr, *d_part_lse = nullptr, *d_ref;
  CHECK(cudaMalloc(&d_pool, h_pool.size() * 2));
  CHECK(cudaMalloc(&d_q, h_q.size() * 2));
  CHECK(cudaMalloc(&d_out, static_cast<size_t>(B) * H * kDV * 2));
  CHECK(cudaMalloc(&d_pt, h_pt.size() * 4));
  CHECK(cudaMalloc(&d_ref, static_cast<size_t>(B) * H * kDV * 4));
  if (splits > 1) {
    CHECK(cudaMalloc(&d_part_o, static_cast<size_t>(B) * splits * H * kDV * 4));
    CHECK(cudaMalloc(&d_part_lse, static_cast<size_t>(B) * splits * H * 4));
  }
  CHECK(cudaMemcpy(d_pool, h_pool.data(), h_pool.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_q, h_q.data(), h_q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_pt, h_pt.data(), h_pt.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_out, 0xFF, static_cast<size_t>(B) * H * kDV * 2));  // NaN poison

  void* fn = nullptr;
  cudaDriverEntryPointQueryResult qr;
  CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &qr));
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kD), static_cast<cuuint64_t>(n_pages * kT)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kD) * 2};
  const cuuint32_t box[2] = {64, kT};
  const cuuint32_t estr[2] = {1, 1};
  CUresult cr = reinterpret_cast<EncodeTiled>(fn)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d_pool, dims, strides, box,
                                                  estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (cr != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(cr));
    return 1;
  }

  Params p{};
  p.q = d_q;
  p.pool = d_pool;
  p.page_table = d_pt;
  p.heads = H;
  p.row_tiles = (H + kM - 1) / kM;
  p.max_pages = max_pages;
  p.kv_len = kv_len;
  p.splits = splits;
  p.scale_log2 = (1.0f / std::sqrt(192.0f)) * 1.4426950408889634f;
  p.out = d_out;
  p.part_o = d_part_o;
  p.part_lse = d_part_lse;
  CHECK(cudaFuncSetAttribute(seesaw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int items = B * p.row_tiles * splits;
  auto launch = [&] {
    seesaw_kernel<<<items, 256, kSmemBytes>>>(map, p);
    if (splits > 1) combine_kernel<<<dim3(H, B), 128>>>(p);
  };
  launch();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  if (verify) {
    CHECK(cudaFuncSetAttribute(reference_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (kD + kv_len) * 4));
    reference_kernel<<<dim3(H, B), 256, (kD + kv_len) * 4>>>(p, d_pool, d_ref);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> h_out(static_cast<size_t>(B) * H * kDV);
    std::vector<float> h_ref(h_out.size());
    CHECK(cudaMemcpy(h_out.data(), d_out, h_out.size() * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(h_ref.data(), d_ref, h_ref.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, max_abs = 0;
    long long bad = 0;
    for (size_t i = 0; i < h_out.size(); ++i) {
      const double x = __bfloat162float(h_out[i]), r = h_ref[i];
      if (!std::isfinite(x)) ++bad;
      num += (x - r) * (x - r);
      den += r * r;
      max_abs = std::max(max_abs, std::fabs(x - r));
    }
    const double rel = std::sqrt(num / den);
    std::printf("verify: rel_l2 %.3e max_abs %.3e non_finite %lld -> %s\n", rel, max_abs, bad,
                (bad == 0 && rel < 1e-2) ? "PASS" : "FAIL");
  }

  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch();
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) launch();
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  const double us = 1000.0 * ms / iters;
  const double rows = static_cast<double>(p.row_tiles) * kM;  // padded, as the matrix steps run them
  const double flop = 2.0 * B * rows * kv_len * (kD + kDV);
  const double bytes = static_cast<double>(B) * kv_len * kD * 2;
  std::printf("B=%d kv=%d H=%d splits=%d items=%d: %.1f us  %.1f TFLOP/s (padded rows)  %.0f GB/s\n", B, kv_len, H,
              splits, items, us, flop / us * 1e-6, bytes / us * 1e-3);
  return 0;
}

// Does compute-sanitizer racecheck see a named-barrier hand-off between
// warpgroups? The tensor-core kernel's producer build hands Q's staging
// region from the matrix warpgroups (cp.async in, ldmatrix out) to the
// producer warpgroup (st.shared after the barrier), and racecheck flagged
// the pair. This probe repeats that pattern alone, with one ingredient
// changed per kernel, so that the tool's verdict can be read per variant
// (an argument runs that variant alone; racecheck's summary is per process):
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o probe racecheck_handover.cu
//   for v in 0 1 2 3 4 5 6 7 8 9; do compute-sanitizer --tool racecheck ./probe $v; done
// Each variant also checks its own result (every thread's loaded words
// must be the values copied in, not the producer's), so a real overlap
// would show as a wrong count, not only as a tool report.
// Found with racecheck 2025.3.1 on an H200 (session 22): every variant
// whose readers passed a barrier of part of the block (bar.sync 1, 256)
// before reading is reported, even variant 7, whose threads read only
// their own words; variants 6 and 8, without that barrier, are clean; no
// variant ever reads a producer value.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

namespace {
constexpr int kMatrixThreads = 256;
constexpr int kBlockThreads = 384;
constexpr int kStageBytes = 16384;  // the staging region: 256 threads x 64 bytes
enum Variant : int {
  kLdmatrixSetmaxnreg = 0,  // the kernel's pattern
  kLdmatrixOnly = 1,        // no register split
  kLdsSetmaxnreg = 2,       // ld.shared instead of ldmatrix
  kLdsOnly = 3,             // neither
  kLdmatrixSyncthreads = 4, // ldmatrix, setmaxnreg, __syncthreads as the hand-off
  kLdsConverged = 5,        // ld.shared, one barrier instruction both roles reach
  kLdsOwnNoMatrixBarrier = 6,  // ld.shared of the thread's own copy: no 256-thread barrier before
  kLdsOwnMatrixBarrier = 7,    // 5 reading the thread's own copy, the 256-thread barrier kept
  kLdsBlockBarrier = 8,        // 5 with a block-wide barrier in place of the 256-thread one
  kStsConverged = 9,           // 5 with st.shared in place of cp.async
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The hand-off at one barrier instruction: the roles' code rejoins for it.
template <bool kOwn, bool kMatrixBarrier, bool kCpAsync>
__device__ __forceinline__ void converged(const uint32_t* src, int* wrong) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x;
  uint32_t r[4] = {0, 0, 0, 0};
  if (tid < kMatrixThreads) {
    for (int k = 0; k < 4; ++k) {
      const int at = (tid * 4 + k) * 16;
      if constexpr (kCpAsync) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem + at)),
                     "l"(reinterpret_cast<const unsigned char*>(src) + at)
                     : "memory");
      } else {
        *reinterpret_cast<uint4*>(smem + at) = *reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned char*>(src) + at);
      }
    }
    if constexpr (kCpAsync) asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    if constexpr (kMatrixBarrier) asm volatile("bar.sync 1, %0;\n" ::"n"(kMatrixThreads) : "memory");
  }
  if constexpr (!kMatrixBarrier) __syncthreads();
  if (tid < kMatrixThreads) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(smem + (kOwn ? tid : (tid + 32) % kMatrixThreads) * 64);
    for (int i = 0; i < 4; ++i) r[i] = words[i];
  }
  __syncthreads();
  if (tid >= kMatrixThreads) {
    uint32_t* words = reinterpret_cast<uint32_t*>(smem);
    for (int i = tid - kMatrixThreads; i < kStageBytes / 4; i += kBlockThreads - kMatrixThreads) {
      words[i] = 0xdeadbeefu;
    }
    return;
  }
  int bad = 0;
  for (int i = 0; i < 4; ++i) bad += r[i] == 0xdeadbeefu;
  if (bad) atomicAdd(wrong, bad);
}

template <int V>
__global__ void __launch_bounds__(kBlockThreads, 1) handover(const uint32_t* src, int* wrong) {
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr bool kSplit = V == kLdmatrixSetmaxnreg || V == kLdsSetmaxnreg || V == kLdmatrixSyncthreads;
  constexpr bool kLdmatrix = V != kLdsSetmaxnreg && V != kLdsOnly;
  const int tid = threadIdx.x;
  if constexpr (V == kLdsConverged || V == kLdsOwnMatrixBarrier || V == kLdsBlockBarrier || V == kStsConverged) {
    converged<V == kLdsOwnMatrixBarrier, V != kLdsBlockBarrier, V != kStsConverged>(src, wrong);
    return;
  }
  auto handoff = [] {
    if constexpr (V == kLdmatrixSyncthreads) {
      __syncthreads();
    } else {
      asm volatile("barrier.sync 2, %0;\n" ::"n"(kBlockThreads) : "memory");
    }
  };
  if (tid >= kMatrixThreads) {
    if constexpr (kSplit) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    handoff();
    // The producer's first stores into the region the matrix threads read.
    uint32_t* words = reinterpret_cast<uint32_t*>(smem);
    for (int i = tid - kMatrixThreads; i < kStageBytes / 4; i += kBlockThreads - kMatrixThreads) {
      words[i] = 0xdeadbeefu;
    }
    return;
  }
  if constexpr (kSplit) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  // 64 bytes a thread, copied in as four 16-byte cp.async.
  for (int k = 0; k < 4; ++k) {
    const int at = (tid * 4 + k) * 16;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem + at)),
                 "l"(reinterpret_cast<const unsigned char*>(src) + at)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  if constexpr (V != kLdsOwnNoMatrixBarrier) asm volatile("bar.sync 1, %0;\n" ::"n"(kMatrixThreads) : "memory");
  // Each thread reads another warp's part (as ldmatrix reads other lanes' rows).
  const int from = V == kLdsOwnNoMatrixBarrier ? tid : (tid + 32) % kMatrixThreads;
  uint32_t r[4];
  if constexpr (kLdmatrix) {
    const int lane = tid & 31;
    const unsigned char* row = smem + ((from & ~31) * 64) + lane * 16;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
  } else {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(smem + from * 64);
    for (int i = 0; i < 4; ++i) r[i] = words[i];
  }
  handoff();
  // Nothing the producer wrote may be seen; 0xdeadbeef is not in src.
  int bad = 0;
  for (int i = 0; i < 4; ++i) bad += r[i] == 0xdeadbeefu;
  if (bad) atomicAdd(wrong, bad);
}

template <int V>
int run(const char* name, const uint32_t* src, int* wrong) {
  cudaFuncSetAttribute(handover<V>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStageBytes);
  cudaMemset(wrong, 0, sizeof(int));
  handover<V><<<132, kBlockThreads, kStageBytes>>>(src, wrong);
  int h = -1;
  cudaMemcpy(&h, wrong, sizeof(int), cudaMemcpyDeviceToHost);
  const cudaError_t e = cudaGetLastError();
  std::printf("variant %d %-28s wrong words %d, %s\n", V, name, h, cudaGetErrorString(e));
  return e == cudaSuccess && h == 0 ? 0 : 1;
}
}  // namespace

// With an argument, only that variant runs (racecheck's summary is per process).
int main(int argc, char** argv) {
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;
  uint32_t* src = nullptr;
  int* wrong = nullptr;
  cudaMalloc(&src, kStageBytes);
  cudaMalloc(&wrong, sizeof(int));
  uint32_t host[kStageBytes / 4];
  for (int i = 0; i < kStageBytes / 4; ++i) host[i] = 0x01000193u * (i + 1);
  cudaMemcpy(src, host, sizeof(host), cudaMemcpyHostToDevice);
  int failed = 0;
  auto want = [&](int v) { return only < 0 || only == v; };
  if (want(0)) failed += run<kLdmatrixSetmaxnreg>("ldmatrix + setmaxnreg", src, wrong);
  if (want(1)) failed += run<kLdmatrixOnly>("ldmatrix", src, wrong);
  if (want(2)) failed += run<kLdsSetmaxnreg>("ld.shared + setmaxnreg", src, wrong);
  if (want(3)) failed += run<kLdsOnly>("ld.shared", src, wrong);
  if (want(4)) failed += run<kLdmatrixSyncthreads>("ldmatrix, __syncthreads", src, wrong);
  if (want(5)) failed += run<kLdsConverged>("ld.shared, converged barrier", src, wrong);
  if (want(6)) failed += run<kLdsOwnNoMatrixBarrier>("ld.shared own, no bar 1", src, wrong);
  if (want(7)) failed += run<kLdsOwnMatrixBarrier>("ld.shared own, bar 1", src, wrong);
  if (want(8)) failed += run<kLdsBlockBarrier>("ld.shared, block barrier", src, wrong);
  if (want(9)) failed += run<kStsConverged>("st.shared in, converged", src, wrong);
  return failed;
}

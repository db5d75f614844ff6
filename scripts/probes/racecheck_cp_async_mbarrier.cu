// Does compute-sanitizer racecheck order cp.async writes that complete on an
// mbarrier (cp.async.mbarrier.arrive.noinc) before another warpgroup's
// writes made after it waited on that mbarrier? The seesaw engine refills a
// tile's rope block this way (warpgroup 0 copies, the block's mbarrier
// completes, warpgroup 1 computes S from it and then stores P over it), and
// racecheck reported the pair for some builds only (session 26). Each
// variant changes one ingredient; an argument runs one variant alone
// (racecheck's summary is per process):
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o probe racecheck_cp_async_mbarrier.cu
//   for v in 0 1 2 3 4 5 6 7; do compute-sanitizer --tool racecheck ./probe $v; done
// Every variant also checks its result: the region must hold the last
// writer's values at the end (warpgroup 1's in 0-5, warpgroup 0's in 6-7).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

namespace {
constexpr int kThreads = 256;
constexpr int kChunks = 8;  // 16-byte copies per copying thread
constexpr int kRegionBytes = 128 * kChunks * 16;
enum Variant : int {
  kMbarrierCompletion = 0,  // the engine's pattern: copies complete on the mbarrier
  kMbarrierAndNamedBarrier = 1,  // 0, with a 256-thread named barrier between issue and wait
  kWaitAllSyncthreads = 2,  // cp.async.wait_all, then __syncthreads: the classic hand-off
  kWaitAllMbarrierArrive = 3,  // cp.async.wait_all, then a plain mbarrier.arrive
  kZeroFillMbarrier = 4,  // 0 with zero-filling copies (source size 0), as past a range's end
  kSecondPhase = 5,  // 0 run twice on one mbarrier: the second hand-off waits for parity 1
  // The engine's other hand-off of a rope block: warpgroup 1 stores P there
  // and arrives at a named barrier of the whole block (bar.arrive); warpgroup
  // 0 syncs on it and refills the block by cp.async (6) or st.shared (7).
  kArriveThenCpAsync = 6,
  kArriveThenStore = 7,
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__global__ void probe(const uint4* src, int variant, int* wrong) {
  __shared__ __align__(128) unsigned char region[kRegionBytes];
  __shared__ __align__(8) uint64_t bar;
  const int tid = threadIdx.x;
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&bar)), "r"(128) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const uint32_t b = smem_addr(&bar);
  if (variant == kArriveThenCpAsync || variant == kArriveThenStore) {
    if (tid >= 128) {
      for (int k = 0; k < kChunks; ++k) {
        *reinterpret_cast<uint4*>(region + (k * 128 + tid - 128) * 16) = make_uint4(tid, k, 7u, 9u);
      }
      asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    } else {
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      for (int k = 0; k < kChunks; ++k) {
        const int at = (k * 128 + tid) * 16;
        if (variant == kArriveThenCpAsync) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(region + at)),
                       "l"(src + (static_cast<size_t>(k * 128 + tid) * 256))
                       : "memory");
        } else {
          *reinterpret_cast<uint4*>(region + at) = make_uint4(tid + 128, k, 7u, 9u);
        }
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
    __syncthreads();
    // The region holds warpgroup 0's copies now: source words or its stores.
    if (tid < 128) {
      for (int k = 0; k < kChunks; ++k) {
        const uint4 v = *reinterpret_cast<const uint4*>(region + (k * 128 + tid) * 16);
        const bool ok = variant == kArriveThenCpAsync ? v.x == 0x5a5a5a5au
                                                      : v.x == static_cast<unsigned>(tid + 128) && v.y == static_cast<unsigned>(k);
        if (!ok) atomicAdd(wrong, 1);
      }
    }
    return;
  }
  const int rounds = variant == kSecondPhase ? 2 : 1;
  for (int round = 0; round < rounds; ++round) {
    if (tid < 128) {
      // Sources a page apart: each copy is its own cold line.
      const uint32_t bytes = variant == kZeroFillMbarrier ? 0 : 16;
      for (int k = 0; k < kChunks; ++k) {
        const int at = (k * 128 + tid) * 16;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(region + at)),
                     "l"(src + (static_cast<size_t>(k * 128 + tid) * 256)), "r"(bytes)
                     : "memory");
      }
      if (variant == kWaitAllSyncthreads || variant == kWaitAllMbarrierArrive) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        if (variant == kWaitAllMbarrierArrive) {
          asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(b) : "memory");
        }
      } else {
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
        if (variant == kMbarrierAndNamedBarrier) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
      }
    } else if (variant == kMbarrierAndNamedBarrier) {
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
    }
    if (variant == kWaitAllSyncthreads) __syncthreads();
    if (tid >= 128) {
      if (variant != kWaitAllSyncthreads) {
        asm volatile(
            "{\n.reg .pred done;\nWAIT:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
            "@!done bra WAIT;\n}\n" ::"r"(b),
            "r"(round & 1)
            : "memory");
      }
      for (int k = 0; k < kChunks; ++k) {
        const int at = (k * 128 + tid - 128) * 16;
        *reinterpret_cast<uint4*>(region + at) = make_uint4(tid, k, 7u, 9u);
      }
    }
    // The next round's copies overwrite what the writers stored: they wait
    // for the writers here, as the engine's refills wait for P's readers.
    if (round + 1 < rounds) __syncthreads();
  }
  __syncthreads();
  if (tid >= 128) {
    for (int k = 0; k < kChunks; ++k) {
      const uint4 v = *reinterpret_cast<const uint4*>(region + (k * 128 + tid - 128) * 16);
      if (v.x != static_cast<unsigned>(tid) || v.y != static_cast<unsigned>(k)) atomicAdd(wrong, 1);
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  const int first = argc > 1 ? std::atoi(argv[1]) : 0;
  const int last = argc > 1 ? first : 7;
  const size_t words = static_cast<size_t>(kChunks) * 128 * 256;
  uint4* src = nullptr;
  int* wrong = nullptr;
  if (cudaMalloc(&src, words * sizeof(uint4)) != cudaSuccess || cudaMalloc(&wrong, sizeof(int)) != cudaSuccess) {
    std::printf("allocation failed\n");
    return 1;
  }
  cudaMemset(src, 0x5a, words * sizeof(uint4));
  int status = 0;
  for (int v = first; v <= last; ++v) {
    cudaMemset(wrong, 0, sizeof(int));
    probe<<<132, kThreads>>>(src, v, wrong);
    int host = -1;
    const cudaError_t e = cudaMemcpy(&host, wrong, sizeof(int), cudaMemcpyDeviceToHost);
    std::printf("variant %d: %s, wrong words %d\n", v, cudaGetErrorString(e), host);
    if (e != cudaSuccess || host != 0) status = 1;
  }
  return status;
}

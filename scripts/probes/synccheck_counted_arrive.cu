// Does compute-sanitizer synccheck accept an mbarrier phase completed by
// counted cp.async arrivals (cp.async.mbarrier.arrive without .noinc: PTX
// raises the pending count as the arrival is issued, so the phase waits for
// the copies without counting them) plus one plain arrival? The seesaw
// engine's TMA build fills a tile past its item's range this way: its
// mbarriers expect one arrival a phase (the TMA issuer's), and synccheck
// reported "Missing wait" and "Barrier overflow" on those arrivals and
// aborted the kernel (tests/gpu/RESULTS.md, session 44); it now uses
// variant 5's pattern. Each variant
// changes one ingredient; an argument runs one variant alone:
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o probe
//   synccheck_counted_arrive.cu for v in 0 1 2 3 4 5; do compute-sanitizer
//   --tool synccheck ./probe $v; done
// Every variant also checks its result: the region must hold the copied
// values (or zeros, where the copies zero-fill) when the wait returns.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {
constexpr int kThreads = 128;
constexpr int kChunks = 4;  // 16-byte copies per thread
constexpr int kRegionBytes = kThreads * kChunks * 16;
enum Variant : int {
  kCounted = 0,              // the engine's pattern: counted arrivals, a warpgroup barrier,
                             // one plain arrival
  kCountedTwoPhases = 1,     // 0 twice on one mbarrier (the second wait is for parity 1)
  kNoinc = 2,                // control: an mbarrier of 128 arrivals, .noinc arrivals (the
                             // engine's other builds)
  kBulkThenCounted = 3,      // a bulk copy's phase (one arrival with its bytes),
                             // then 0: the TMA build's mix
  kWaitGroupThenArrive = 4,  // each thread waits for its own copies, a warpgroup
                             // barrier, one plain arrival
  // The engine's pattern since session 44: an mbarrier of 128 arrivals; a
  // bulk copy's phase gets all of them from its issuing thread (one with
  // the bytes, then 127 at once), a phase of per-thread copies 128 .noinc ones.
  kBulkAllArrivalsThenNoinc = 5
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, "
      "[%0];\n}\n" ::"r"(bar)
      : "memory");
}
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__global__ void probe(const uint4* src, int variant, int* wrong) {
  __shared__ __align__(128) unsigned char region[kRegionBytes];
  __shared__ __align__(8) uint64_t bar;
  const int tid = threadIdx.x;
  const uint32_t b = smem_addr(&bar);
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b),
                 "r"(variant == kNoinc || variant == kBulkAllArrivalsThenNoinc ? kThreads : 1)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Phase `phase` filled by per-thread copies (odd phases zero-fill), then
  // checked by every thread after its wait.
  auto fill_and_check = [&](uint32_t phase) {
    const bool valid = (phase & 1) == 0;
    for (int k = 0; k < kChunks; ++k) {
      cp_async_16(smem_addr(region + (k * kThreads + tid) * 16), src + k * kThreads + tid, valid);
    }
    if (variant == kNoinc || variant == kBulkAllArrivalsThenNoinc) {
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
    } else {
      if (variant == kWaitGroupThenArrive) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
      } else {
        asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
      }
      asm volatile("bar.sync 1, %0;\n" ::"r"(kThreads) : "memory");
      if (tid == 0) arrive(b);
    }
    wait(b, phase & 1);
    for (int k = 0; k < kChunks; ++k) {
      const uint4 got = *reinterpret_cast<const uint4*>(region + (k * kThreads + tid) * 16);
      const uint4 want = valid ? src[k * kThreads + tid] : make_uint4(0, 0, 0, 0);
      if (got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w) atomicAdd(wrong, 1);
    }
    __syncthreads();  // every thread has read the region before the next phase
                      // overwrites it
  };
  uint32_t phase = 0;
  if (variant == kBulkThenCounted || variant == kBulkAllArrivalsThenNoinc) {
    if (tid == 0) {
      asm volatile(
          "{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 "
          "state, [%0], %1;\n}\n" ::"r"(b),
          "r"(kRegionBytes)
          : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx:"
          ":bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_addr(region)),
          "l"(src), "r"(kRegionBytes), "r"(b)
          : "memory");
      if (variant == kBulkAllArrivalsThenNoinc) {
        asm volatile(
            "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 "
            "state, [%0], %1;\n}\n" ::"r"(b),
            "r"(kThreads - 1)
            : "memory");
      }
    }
    wait(b, 0);
    for (int k = 0; k < kChunks; ++k) {
      const uint4 got = *reinterpret_cast<const uint4*>(region + (k * kThreads + tid) * 16);
      const uint4 want = src[k * kThreads + tid];
      if (got.x != want.x || got.w != want.w) atomicAdd(wrong, 1);
    }
    __syncthreads();
    phase = 1;
  }
  fill_and_check(phase);
  if (variant == kCountedTwoPhases) fill_and_check(phase + 1);
}
}  // namespace

int main(int argc, char** argv) {
  uint4* src = nullptr;
  int* wrong = nullptr;
  if (cudaMalloc(&src, kRegionBytes) != cudaSuccess || cudaMalloc(&wrong, sizeof(int)) != cudaSuccess) return 2;
  unsigned host[kRegionBytes / 4];
  for (int i = 0; i < kRegionBytes / 4; ++i) host[i] = 0x9e3779b9u * (i + 1);
  cudaMemcpy(src, host, kRegionBytes, cudaMemcpyHostToDevice);
  const char* names[] = {"counted",
                         "counted, two phases",
                         "noinc (control)",
                         "bulk copy, then counted",
                         "wait_all, then one arrival",
                         "bulk copy with all arrivals, then noinc"};
  int failed = 0;
  for (int v = 0; v < 6; ++v) {
    if (argc > 1 && std::atoi(argv[1]) != v) continue;
    cudaMemset(wrong, 0, sizeof(int));
    probe<<<1, kThreads>>>(src, v, wrong);
    const cudaError_t e = cudaDeviceSynchronize();
    int bad = -1;
    if (e == cudaSuccess) cudaMemcpy(&bad, wrong, sizeof(int), cudaMemcpyDeviceToHost);
    std::printf("variant %d (%s): %s, %d wrong values\n", v, names[v], cudaGetErrorString(e), bad);
    failed += e != cudaSuccess || bad != 0;
    if (e != cudaSuccess) break;  // a sticky error: later launches would fail too
  }
  return failed ? 1 : 0;
}

// fp8 wgmma forms: S^T's e4m3 steps from shared memory and P V's steps
// with V^T from registers.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/primitives.cuh"

namespace helixmla_tc {

// S^T: D[64 x 48] (+)= A[64 x 32] B[48 x 32]^T, e4m3, both in shared memory.
__device__ __forceinline__ void wgmma_m64n48k32_e4m3_ss(float (&d)[24], u64 desc_a, u64 desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, %24, %25, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
// P V: D[64 x 16] += A[64 x 32] (registers, e4m3) B[16 x 32]^T (shared
// memory, e5m2 for P's high part, else e4m3).
template <bool B_E5M2>
__device__ __forceinline__ void wgmma_m64n16k32_fp8_rs(float (&d)[8], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_M64N16K32_RS(BTYPE)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3." BTYPE " "                           \
               "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1;\n}\n"                         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
                 "+f"(d[7])                                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (B_E5M2) {
    HMLA_TC_M64N16K32_RS("e5m2");
  } else {
    HMLA_TC_M64N16K32_RS("e4m3");
  }
#undef HMLA_TC_M64N16K32_RS
}
// The same as wgmma_m64n48k32_e4m3_ss, a sum's first step (ACCUMULATE
// false) taking D as an output only: summed in float32 between chunks, a
// single accumulator set read and written by every step, its first one
// by a predicate, came out of ptxas adding a doubled earlier chunk at
// each fold (the 48-row engine's GPU test, session 30).
#define HMLA_TC_D24_OPERANDS(D) \
  D(d[0]), D(d[1]), D(d[2]), D(d[3]), D(d[4]), D(d[5]), D(d[6]), D(d[7]), D(d[8]), D(d[9]), D(d[10]), \
      D(d[11]), D(d[12]), D(d[13]), D(d[14]), D(d[15]), D(d[16]), D(d[17]), D(d[18]), D(d[19]), \
      D(d[20]), D(d[21]), D(d[22]), D(d[23])
#define HMLA_TC_D24_READ_WRITE(x) "+f"(x)
#define HMLA_TC_D24_WRITE(x) "=f"(x)
template <bool ACCUMULATE>
__device__ __forceinline__ void wgmma_m64n48k32_e4m3_ss(float (&d)[24], u64 desc_a, u64 desc_b) {
#define HMLA_TC_M64N48K32_SS(D, SCALE_D)                                 \
  asm volatile("wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 "    \
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, " \
               "%24, %25, " SCALE_D ", 1, 1;\n"                           \
               : HMLA_TC_D24_OPERANDS(D)                                  \
               : "l"(desc_a), "l"(desc_b))
  if constexpr (ACCUMULATE) {
    HMLA_TC_M64N48K32_SS(HMLA_TC_D24_READ_WRITE, "1");
  } else {
    HMLA_TC_M64N48K32_SS(HMLA_TC_D24_WRITE, "0");
  }
#undef HMLA_TC_M64N48K32_SS
}
#undef HMLA_TC_D24_WRITE
#undef HMLA_TC_D24_READ_WRITE
#undef HMLA_TC_D24_OPERANDS
// P V of 48 rows: D[64 x 48] += A[64 x 32] (registers, e4m3) B[48 x 32]^T
// (shared memory, e5m2 for P's high part, else e4m3).
template <bool B_E5M2>
__device__ __forceinline__ void wgmma_m64n48k32_fp8_rs(float (&d)[24], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_M64N48K32_RS(BTYPE)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                           \
               "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3." BTYPE " "         \
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, " \
               "{%24,%25,%26,%27}, %28, p, 1, 1;\n}\n"                             \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
                 "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
                 "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (B_E5M2) {
    HMLA_TC_M64N48K32_RS("e5m2");
  } else {
    HMLA_TC_M64N48K32_RS("e4m3");
  }
#undef HMLA_TC_M64N48K32_RS
}

}  // namespace helixmla_tc

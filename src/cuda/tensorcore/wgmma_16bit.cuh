// 16-bit wgmma forms (m64n32k16, m64n64k16, m64n256k16) and the rescale
// of an m64n256 accumulator.
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
// Device code, reached from tensorcore_kernel.cuh under __CUDACC__.
#pragma once

#include "cuda/tensorcore/primitives.cuh"

namespace helixmla_tc {

// Shared by the two m64n32k16 forms below: the instruction text up to the
// A operand, the 16 accumulators as operands read and written (ACC) or
// written only (OUT), and the choice of the form's INSTR(TYPES, D, SCALE_D)
// for ELEM and ACCUMULATE.
#define HMLA_TC_M64N32_HEAD(TYPES, SCALE_D)                              \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"                  \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPES " "               \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
#define HMLA_TC_D16_OPERANDS(D)                                                                    \
  D(d[0]), D(d[1]), D(d[2]), D(d[3]), D(d[4]), D(d[5]), D(d[6]), D(d[7]), D(d[8]), D(d[9]), D(d[10]), \
      D(d[11]), D(d[12]), D(d[13]), D(d[14]), D(d[15])
#define HMLA_TC_ACC(x) "+f"(x)
#define HMLA_TC_OUT(x) "=f"(x)
#define HMLA_TC_BY_ELEM_AND_ACCUMULATE(INSTR)     \
  if constexpr (ELEM == kElemBf16 && ACCUMULATE) { \
    INSTR("bf16.bf16", HMLA_TC_ACC, "1");          \
  } else if constexpr (ELEM == kElemBf16) {        \
    INSTR("bf16.bf16", HMLA_TC_OUT, "0");          \
  } else if constexpr (ACCUMULATE) {               \
    INSTR("f16.f16", HMLA_TC_ACC, "1");            \
  } else {                                         \
    INSTR("f16.f16", HMLA_TC_OUT, "0");            \
  }

// S partial: D[64 x 32] (+)= A[64 x 16] B[32 x 16]^T, both K-major in shared
// memory. The first step of a sum (ACCUMULATE false) overwrites D and takes
// it as an output only, so D needs no zeroing by ordinary instructions and
// no copy of its old value (either, with another wgmma in flight, makes
// ptxas serialise the wgmma pipeline).
template <int ELEM, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], u64 desc_a, u64 desc_b) {
#define HMLA_TC_WGMMA_M64N32K16_SS(TYPES, D, SCALE_D)                                    \
  asm volatile(HMLA_TC_M64N32_HEAD(TYPES, SCALE_D) "%16, %17, p, 1, 1, 0, 0;\n}\n" \
               : HMLA_TC_D16_OPERANDS(D)                                           \
               : "l"(desc_a), "l"(desc_b))
  HMLA_TC_BY_ELEM_AND_ACCUMULATE(HMLA_TC_WGMMA_M64N32K16_SS)
#undef HMLA_TC_WGMMA_M64N32K16_SS
}

// The same with A (a 64 x 16 slice of Q) from registers, for the k16 steps
// whose Q fragments a warpgroup keeps: they read only B from shared memory.
template <int ELEM, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[16], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_WGMMA_M64N32K16_RS(TYPES, D, SCALE_D)                                                \
  asm volatile(HMLA_TC_M64N32_HEAD(TYPES, SCALE_D) "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n" \
               : HMLA_TC_D16_OPERANDS(D)                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  HMLA_TC_BY_ELEM_AND_ACCUMULATE(HMLA_TC_WGMMA_M64N32K16_RS)
#undef HMLA_TC_WGMMA_M64N32K16_RS
}
#undef HMLA_TC_BY_ELEM_AND_ACCUMULATE
#undef HMLA_TC_OUT
#undef HMLA_TC_ACC
#undef HMLA_TC_D16_OPERANDS
#undef HMLA_TC_M64N32_HEAD

// The 128 accumulator registers of an m64n256 wgmma: operand list and
// their place holders %0..%127 in the instruction text.
#define HMLA_TC_D128_TEXT "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define HMLA_TC_D128_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// O half: D[64 x 256] += A[64 x 16] (registers) B[16 x 256], B N-major in shared memory.
template <int ELEM>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const u32 (&a)[4], u64 desc_b) {
#define HMLA_TC_WGMMA_M64N256K16_RS(TYPES)                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " " HMLA_TC_D128_TEXT ", "    \
               "{%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"                                  \
               : HMLA_TC_D128_OPERANDS(d)                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (ELEM == kElemBf16) {
    HMLA_TC_WGMMA_M64N256K16_RS("bf16.bf16");
  } else {
    HMLA_TC_WGMMA_M64N256K16_RS("f16.f16");
  }
#undef HMLA_TC_WGMMA_M64N256K16_RS
}

// The seesaw engine's matrix steps. P V with P from shared memory (the
// other warpgroup's tile): D[64 x 256] += A[64 x 16] B[16 x 256], A K-major,
// B N-major.
template <int ELEM>
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], u64 desc_a, u64 desc_b) {
#define HMLA_TC_WGMMA_M64N256K16_SS(TYPES)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " " HMLA_TC_D128_TEXT ", "      \
               "%128, %129, p, 1, 1, 0, 1;\n}\n"                                                   \
               : HMLA_TC_D128_OPERANDS(d)                                                         \
               : "l"(desc_a), "l"(desc_b))
  if constexpr (ELEM == kElemBf16) {
    HMLA_TC_WGMMA_M64N256K16_SS("bf16.bf16");
  } else {
    HMLA_TC_WGMMA_M64N256K16_SS("f16.f16");
  }
#undef HMLA_TC_WGMMA_M64N256K16_SS
}

// S of a whole 64-token tile: D[64 x 64] (+)= A[64 x 16] B[64 x 16]^T, both
// K-major in shared memory; `accumulate` 0 overwrites D.
#define HMLA_TC_D32_TEXT                                                                                      \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28," \
  "%29,%30,%31}"
#define HMLA_TC_D8_OPERANDS(d, i)                                                                            \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
template <int ELEM>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], u64 desc_a, u64 desc_b, int accumulate) {
#define HMLA_TC_WGMMA_M64N64K16_SS(TYPES)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES " " HMLA_TC_D32_TEXT ", %32, %33, p, 1, 1, 0, 0;\n}\n" \
               : HMLA_TC_D8_OPERANDS(d, 0), HMLA_TC_D8_OPERANDS(d, 8), HMLA_TC_D8_OPERANDS(d, 16),          \
                 HMLA_TC_D8_OPERANDS(d, 24)                                                                \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
  if constexpr (ELEM == kElemBf16) {
    HMLA_TC_WGMMA_M64N64K16_SS("bf16.bf16");
  } else {
    HMLA_TC_WGMMA_M64N64K16_SS("f16.f16");
  }
#undef HMLA_TC_WGMMA_M64N64K16_SS
}
#undef HMLA_TC_D8_OPERANDS
#undef HMLA_TC_D32_TEXT

// A warpgroup's 256 output columns in the m64n256 accumulator layout
// (rows 16 warp + g: elements 4 j, 4 j + 1; + 8: 4 j + 2, 4 j + 3) times
// their rows' factors; skipped where every factor of the warp is 1, as on
// most tiles once the maxima settle.
__device__ __forceinline__ void rescale_o_half(float (&o)[128], float f_lo, float f_hi) {
  if (__any_sync(0xffffffffu, f_lo != 1.0f || f_hi != 1.0f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= f_lo;
      o[4 * j + 1] *= f_lo;
      o[4 * j + 2] *= f_hi;
      o[4 * j + 3] *= f_hi;
    }
  }
}

}  // namespace helixmla_tc

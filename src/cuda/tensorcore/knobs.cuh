// The kernel's A/B knobs (HELIXMLA_TC_*), each default and what chose it;
// the 48-row fp8-steps engine keeps its one knob beside it
// (decode_tile_fp8_steps_split_latents.cuh).
// Part of the tensor-core kernel, whose design tensorcore_kernel.cuh
// describes. Built by nvcc and, inlined into one text, by NVRTC, so it
// includes only its sibling parts.
#pragma once

// k16 steps of S per warpgroup that take Q from registers (Config::
// kQRegSteps), by KV kind; defined on the command line for A/B runs
// (scripts/gpu-check.sh variants). 16-bit KV takes 16, which leaves one
// 64-column block of Q in shared memory, because the serial loop that
// pages under 8 ran until session 12 waited on each S, whose shared-memory
// Q reads 16 steps shorten (case 16 432 -> 405-408 us, session 11; session
// 6 had found 12 best at page 64, where 16 measures the same). fp8 KV's
// matrix warpgroups have 232 registers (the producer warpgroup has the
// rest), not 255: at 16 steps ptxas serialises the wgmmas, at 12 not.
#ifndef HELIXMLA_TC_Q_REG_STEPS_16BIT
#define HELIXMLA_TC_Q_REG_STEPS_16BIT 16
#endif
#ifndef HELIXMLA_TC_Q_REG_STEPS_FP8
#define HELIXMLA_TC_Q_REG_STEPS_FP8 12
#endif

// 16-row fp8 tiles: KV stages, blocks per SM, and whether each warp keeps
// its Q fragments in registers (36 per thread) instead of reading them
// with ldmatrix every tile (A/B runs as above). Session 7 chose two stages
// and three blocks (78 registers): case 11 278 us against 291 with four
// stages and two. By session 13 the loop was bound by the shared-memory
// pipe (86% of cycles issued a wavefront; a quarter of them Q's
// fragments), and Q in registers (128 registers, so two blocks) took case
// 11 213.5 -> 209.3 us with four stages (two blocks without it: 220.1).
#ifndef HELIXMLA_TC_M16_FP8_STAGES
#define HELIXMLA_TC_M16_FP8_STAGES 4
#endif
#ifndef HELIXMLA_TC_M16_FP8_BLOCKS_PER_SM
#define HELIXMLA_TC_M16_FP8_BLOCKS_PER_SM 2
#endif
#ifndef HELIXMLA_TC_M16_FP8_Q_IN_REGISTERS
#define HELIXMLA_TC_M16_FP8_Q_IN_REGISTERS 1
#endif
// 16-row fp8: 32-token KV tiles per loop step (A/B runs as above). Each
// step costs three block barriers and a softmax round (vote, shuffles, P
// written and read); two tiles a step halve that per token, with the copies
// still issued a tile at a time and Q, kept in registers, staged in the
// ring's stages the prologue leaves empty (two blocks per SM need its 18
// KB). Case 11 209.8 -> 190.9 us (session 14); two S accumulation chains
// per n8 tile, 2% on one-tile steps, added nothing on top.
#ifndef HELIXMLA_TC_M16_FP8_TILES_PER_STEP
#define HELIXMLA_TC_M16_FP8_TILES_PER_STEP 2
#endif
// The same for 32-row fp8 tiles (17-32 rows with fp8 KV) in their one-block
// build (the two-block build, Config's BLOCKS, takes one): 16 heads x q_len
// 2 at 8, 32 and 128 requests took 4%, 7% and 8% less (373 -> 342 us at
// 128, two rounds; session 15).
#ifndef HELIXMLA_TC_M32_FP8_TILES_PER_STEP
#define HELIXMLA_TC_M32_FP8_TILES_PER_STEP 2
#endif

// 16-bit wgmma: KV stages (A/B runs as above). Five fit beside Q's 16
// register steps, but four measured as fast or faster on every 64-row case
// in two rounds (case 16 402.3 against 407.5 us, case 4 329.7 against
// 332.6; session 12), and leave 36 KB of shared memory free.
#ifndef HELIXMLA_TC_WGMMA_16BIT_STAGES
#define HELIXMLA_TC_WGMMA_16BIT_STAGES 4
#endif
// Lazy rescaling (exp2 units): a row's reference maximum moves only when a
// tile's maximum passes it by more than this, so O's rescale (and, on the
// 16-row kernel, the work around it) is skipped on almost every tile after
// the first. P stays below 2^slack, which bf16 and fp16 hold with their
// full precision. 0 rescales whenever the maximum moves.
#ifndef HELIXMLA_TC_RESCALE_SLACK
#define HELIXMLA_TC_RESCALE_SLACK 8
#endif

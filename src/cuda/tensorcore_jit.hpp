// Just-in-time tensor-core kernels: the embedded kernel source plus an entry
// point for one variant, compiled with NVRTC (through the disk cache) and
// loaded once per device into a process-wide table. The driver API is reached
// through the runtime's entry-point query, so the library does not need
// libcuda at load time (machines without a GPU driver still load it).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/nvrtc_compiler.hpp"
#include "cuda/tensorcore_variants.hpp"

namespace helixmla::cuda {

inline constexpr const char* kTensorcoreJitEntry = "helixmla_tc_jit_kernel";

// The whole NVRTC program for `variant` on `arch` (e.g. "sm_90a").
NvrtcProgram tensorcore_jit_program(const TensorcoreVariant& variant, const std::string& arch);

// The variant's kernel on the current device, compiled or loaded on first
// use, with its dynamic shared-memory limit raised to `smem_bytes`. Throws
// RuntimeFailure when NVRTC or the driver fails.
CUfunction tensorcore_jit_function(const TensorcoreVariant& variant, int smem_bytes);

// Registers per thread the loaded kernel was built with.
int jit_kernel_registers(CUfunction function);

// cuLaunchKernel on `stream` with `threads` threads per block (the
// variant's block_threads()).
void launch_jit_kernel(CUfunction function, unsigned blocks, int threads, int smem_bytes, cudaStream_t stream,
                       void** args);

// Every tensor-core kernel's second argument: a tensor map of
// the 16-bit `pool` as `rows` rows of 576 elements, read in 64 x 64 boxes
// into the seesaw engine's 128-byte-swizzled blocks. Throws RuntimeFailure
// where the driver cannot encode it (a pool not 16-byte aligned, over 2^31 rows).
void encode_kv_tensor_map(void* map, const void* pool, std::int64_t rows);

}  // namespace helixmla::cuda

// Ordinary kernel launches that report their own failure. A <<<>>> launch
// reports it only through cudaGetLastError, which also returns any earlier
// error of the thread's that nobody read (a failed cudaMalloc its caller
// handled, say): a check after it blamed the launch for that error and threw
// with the launch already queued, midway through a run's kernels (the
// attention queued, its combine not) and leaving the caller's error cleared.
// cudaLaunchKernelEx returns the launch's own status and leaves the thread's
// last error to its owner.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace helixmla::cuda {

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t dynamic_smem_bytes,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_smem_bytes;
  config.stream = stream;
  HELIXMLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace helixmla::cuda

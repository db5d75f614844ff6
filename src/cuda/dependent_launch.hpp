// Programmatic dependent launch (Hopper and later): a kernel launched this
// way may start while the kernel before it on the stream is still running,
// so its launch latency (and any prologue that reads nothing the previous
// kernel writes) hides behind that kernel's tail. The kernel must call
// wait_for_previous_grid() (dependent_launch.cuh) before it reads anything
// the previous kernel wrote: that waits for the previous grid to finish and
// its writes to be visible. Captured into a CUDA graph, the launch becomes a
// programmatic edge.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_check.hpp"

namespace helixmla::cuda {

// Whether `kernel` (a __global__ function) runs on the current device from
// code built for compute_90 or later, where its wait_for_previous_grid()
// calls are real (code JIT-compiled from older PTX has them compiled out, so
// it must not be launched early). Cached per device and kernel.
bool dependent_launch_supported(const void* kernel);

// Launches `kernel` on `stream` early (programmatic) when the kernel
// supports it, else as an ordinary launch.
template <typename... Params, typename... Args>
void launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  if (dependent_launch_supported(reinterpret_cast<const void*>(kernel))) {
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  HELIXMLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace helixmla::cuda

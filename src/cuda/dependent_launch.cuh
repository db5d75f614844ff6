// Device side of programmatic dependent launch (see dependent_launch.hpp).
// Both are no-ops in a kernel that was launched the ordinary way, and are
// compiled out below sm_90 (such kernels are never launched early).
#pragma once

namespace helixmla::cuda {

// Waits until the previous kernel on the stream has finished and its writes
// are visible.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel, if launched early, start now (it still waits for
// this grid's completion before reading what it writes).
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace helixmla::cuda

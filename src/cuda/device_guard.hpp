// Makes a device current for a scope and restores the previous one, so work
// for a Problem on device N never lands on whatever device the caller had
// current (several GPUs in one process: Helix, engines with one thread).
#pragma once

#include <cuda_runtime.h>

#include <new>

#include "cuda/cuda_check.hpp"

namespace helixmla::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    HELIXMLA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) HELIXMLA_CUDA_CHECK(cudaSetDevice(device));
  }
  // For paths that must not throw (a destructor's cudaFree): a device that
  // cannot be queried or made current leaves the thread's as it was.
  DeviceGuard(int device, std::nothrow_t) noexcept {
    restore_ = cudaGetDevice(&previous_) == cudaSuccess;
    if (restore_ && previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    int current = previous_;
    if (restore_ && cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = true;
};

}  // namespace helixmla::cuda

// Makes a device current for a scope and restores the previous one, so work
// for a Problem on device N never lands on whatever device the caller had
// current (several GPUs in one process: Helix, engines with one thread).
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"

namespace helixmla::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    HELIXMLA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) HELIXMLA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int current = previous_;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace helixmla::cuda

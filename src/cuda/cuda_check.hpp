// Turns CUDA runtime failures into helixmla::RuntimeFailure with the call site.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "helixmla/error.hpp"

namespace helixmla::cuda {

inline void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) {
    throw RuntimeFailure(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                         ": " + cudaGetErrorString(status));
  }
}

}  // namespace helixmla::cuda

#define HELIXMLA_CUDA_CHECK(call) ::helixmla::cuda::check_cuda((call), #call, __FILE__, __LINE__)

#include "cuda/run_memory.hpp"

#include "cuda/capture_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_guard.hpp"

namespace helixmla::cuda {

RunMemory::~RunMemory() {
  if (owned_workspace_ == nullptr) return;
  RelaxedCaptureMode relaxed;
  // A run may be released from a thread with another device current, and
  // cudaFree is specified for memory of the current device only.
  const DeviceGuard on_owner(owned_device_, std::nothrow);
  cudaFree(owned_workspace_);
}

void* RunMemory::workspace(void* given, std::size_t bytes) {
  if (given != nullptr) return given;
  if (owned_workspace_ == nullptr) {
    HELIXMLA_CUDA_CHECK(cudaGetDevice(&owned_device_));
    HELIXMLA_CUDA_CHECK(cudaMalloc(&owned_workspace_, bytes > 0 ? bytes : 1));
  }
  return owned_workspace_;
}

unsigned char* RunMemory::staging(std::size_t bytes) {
  staging_ = PinnedStaging(bytes);
  return staging_.data();
}

}  // namespace helixmla::cuda

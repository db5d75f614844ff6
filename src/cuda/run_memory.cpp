#include "cuda/run_memory.hpp"

#include "cuda/capture_check.hpp"
#include "cuda/cuda_check.hpp"

namespace helixmla::cuda {

RunMemory::~RunMemory() {
  if (owned_workspace_ == nullptr) return;
  RelaxedCaptureMode relaxed;
  cudaFree(owned_workspace_);
}

void* RunMemory::workspace(void* given, std::size_t bytes) {
  if (given != nullptr) return given;
  if (owned_workspace_ == nullptr) HELIXMLA_CUDA_CHECK(cudaMalloc(&owned_workspace_, bytes > 0 ? bytes : 1));
  return owned_workspace_;
}

unsigned char* RunMemory::staging(std::size_t bytes) {
  staging_ = PinnedStaging(bytes);
  return staging_.data();
}

}  // namespace helixmla::cuda

// What a prepared CUDA run owns besides its launch arguments: the pinned
// staging copy of its metadata (held until the upload has completed) and,
// when the caller passed no workspace, an internal one that lives as long as
// the run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/pinned_staging.hpp"

namespace helixmla::cuda {

class RunMemory {
 public:
  RunMemory() = default;
  RunMemory(const RunMemory&) = delete;
  RunMemory& operator=(const RunMemory&) = delete;
  ~RunMemory();

  // The caller's workspace when given, else an internal one of `bytes`.
  void* workspace(void* given, std::size_t bytes);
  // Host memory for `bytes` of metadata, to fill before upload().
  unsigned char* staging(std::size_t bytes);
  // Enqueues the copy of the first `bytes` of the staging memory to `device`.
  void upload(void* device, std::size_t bytes, cudaStream_t stream) { staging_.upload(device, bytes, stream); }

 private:
  void* owned_workspace_ = nullptr;
  int owned_device_ = 0;  // where owned_workspace_ was allocated
  PinnedStaging staging_;
};

}  // namespace helixmla::cuda

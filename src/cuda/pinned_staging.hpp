// Pinned host buffers for metadata uploads, recycled through a process-wide
// pool. Freeing pinned memory (cudaFreeHost) waits for the whole device, so a
// prepared run that owned its buffer would synchronise the host every time an
// engine dropped last step's run; a lease instead returns its buffer to the
// pool with an event that marks the end of the copy reading it, and the pool
// hands a buffer out again only once that event has completed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace helixmla::cuda {

class PinnedStaging {
 public:
  PinnedStaging() = default;
  explicit PinnedStaging(std::size_t bytes);
  PinnedStaging(PinnedStaging&& other) noexcept;
  PinnedStaging& operator=(PinnedStaging&& other) noexcept;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging();

  unsigned char* data() const { return data_; }
  // Enqueues the copy of the first `bytes` into `device` on `stream`; the
  // buffer stays reserved until that copy has completed.
  void upload(void* device, std::size_t bytes, cudaStream_t stream);

 private:
  void release();

  int device_ = 0;
  unsigned char* data_ = nullptr;
  std::size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;
};

// Pinned bytes the pool has made so far (it keeps them for the process).
std::size_t pinned_staging_bytes();

}  // namespace helixmla::cuda

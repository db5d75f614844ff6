// A SyntheticBatch mirrored into CUDA device memory, for GPU tests, the
// command-line program and benchmarks. Only built with CUDA.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <cstddef>

#include "synthetic_batch.hpp"

namespace helixmla::testing {

// Owning device allocation (cudaMalloc); moves, never copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  void fill_bytes(unsigned char value);

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Number of CUDA devices usable by this process (0 without a driver or GPU).
int cuda_device_count();

class DeviceBatch {
 public:
  explicit DeviceBatch(SyntheticBatch& host, int device = 0);
  // Same metadata as the host batch, tensors in device memory.
  Problem problem() const;
  // NaN-fills device outputs and stats.
  void poison_outputs();
  // Copies device outputs and stats back into the host batch.
  void download_outputs();

 private:
  SyntheticBatch& host_;
  int device_;
  DeviceBuffer q_, pool_, out_, stats_;
};

}  // namespace helixmla::testing

#endif

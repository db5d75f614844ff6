// A SyntheticBatch mirrored into CUDA device memory, for GPU tests, the
// command-line program and benchmarks. Only built with CUDA.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
  // Fills every byte and waits for the fill (ordered before any stream's later work).
  void fill_bytes(unsigned char value);

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Number of CUDA devices usable by this process (0 without a driver or GPU).
int cuda_device_count();
// Why a test that needs `needed` CUDA devices cannot run in this process,
// empty when it can: how many it found and, for an error other than "no
// driver" or "no device", which error hid them.
std::string missing_cuda_devices(int needed);
// Whether a test that needs `needed` devices must fail rather than skip
// without them: HELIXMLA_REQUIRE_GPUS=N (scripts/gpu-check.sh sets the
// machine's GPU count) asks it of tests that need at most N, so that a
// broken driver cannot pass a GPU run as all skipped.
bool cuda_devices_required(int needed);

class DeviceBatch {
 public:
  explicit DeviceBatch(SyntheticBatch& host, int device = 0);
  // Same metadata as the host batch, tensors in device memory.
  Problem problem() const;
  // NaN-fills device outputs and stats.
  void poison_outputs();
  // Copies device outputs and stats back into the host batch; throws
  // RuntimeFailure if the device's Q or KV pool is no longer what was
  // uploaded (a run that wrote into its inputs).
  void download_outputs();

 private:
  SyntheticBatch& host_;
  int device_;
  DeviceBuffer q_, pool_, out_, stats_;
};

// A batch whose tensors are drawn directly on the device (for benchmarks of
// gigabyte-sized caches); the metadata is a metadata-only SyntheticBatch.
class DeviceSyntheticBatch {
 public:
  DeviceSyntheticBatch(BatchSpec spec, int device = 0);
  Problem problem();
  const SyntheticBatch& metadata() const { return meta_; }
  // NaN-fills the outputs and stats on `stream` (a cudaStream_t).
  void poison_outputs(void* stream);
  // Host copies of the device tensors, for checking against the reference.
  void download(std::vector<std::byte>& q, std::vector<std::byte>& pool, std::vector<std::byte>& out) const;
  std::size_t device_bytes() const { return q_.bytes() + pool_.bytes() + out_.bytes() + stats_.bytes(); }

 private:
  SyntheticBatch meta_;
  int device_;
  DeviceBuffer q_, pool_, out_, stats_;
};

// Relative L2 error of the first `requests` requests' outputs, downloaded,
// against the float64 CPU reference over the same rows (infinity when an
// output is not finite): the check for batches too large to reference whole.
double first_requests_rel_l2(DeviceSyntheticBatch& batch, std::int32_t requests);

}  // namespace helixmla::testing

#endif

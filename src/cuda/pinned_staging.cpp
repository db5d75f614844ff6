#include "cuda/pinned_staging.hpp"

#include <algorithm>
#include <bit>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace helixmla::cuda {

namespace {

struct PooledBuffer {
  int device = 0;  // the event belongs to this device's context
  unsigned char* data = nullptr;
  std::size_t capacity = 0;
  cudaEvent_t copied = nullptr;
};

// Buffers are kept for the life of the process: engines prepare a run every
// step with similar sizes, so a handful of buffers serve them all.
class StagingPool {
 public:
  PooledBuffer take(std::size_t bytes) {
    int device = 0;
    HELIXMLA_CUDA_CHECK(cudaGetDevice(&device));
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = 0; i < free_.size(); ++i) {
        PooledBuffer& b = free_[i];
        if (b.device != device || b.capacity < bytes) continue;
        if (cudaEventQuery(b.copied) == cudaSuccess) {
          PooledBuffer taken = b;
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return taken;
        }
        // A copy still in flight answers cudaErrorNotReady; clear only that,
        // never an error the caller has yet to see.
        if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      }
    }
    // Whole powers of two: metadata that grows a little at a time (a page
    // table widening with its longest request) would otherwise outgrow
    // every pooled buffer at each step and leave one more behind, for good.
    PooledBuffer fresh;
    fresh.device = device;
    fresh.capacity = std::bit_ceil(std::max<std::size_t>(bytes, 4096));
    HELIXMLA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&fresh.data), fresh.capacity));
    if (const cudaError_t made = cudaEventCreateWithFlags(&fresh.copied, cudaEventDisableTiming); made != cudaSuccess) {
      cudaFreeHost(fresh.data);
      HELIXMLA_CUDA_CHECK(made);
    }
    std::lock_guard lock(mutex_);
    held_bytes_ += fresh.capacity;
    return fresh;
  }

  std::size_t held_bytes() {
    std::lock_guard lock(mutex_);
    return held_bytes_;
  }

  void give_back(PooledBuffer buffer) {
    std::lock_guard lock(mutex_);
    free_.push_back(buffer);
  }

 private:
  std::mutex mutex_;
  std::vector<PooledBuffer> free_;
  std::size_t held_bytes_ = 0;  // every buffer made, free or leased
};

StagingPool& pool() {
  static StagingPool* instance = new StagingPool();  // never destroyed: no device calls at exit
  return *instance;
}

}  // namespace

std::size_t pinned_staging_bytes() { return pool().held_bytes(); }

PinnedStaging::PinnedStaging(std::size_t bytes) {
  const PooledBuffer b = pool().take(bytes);
  device_ = b.device;
  data_ = b.data;
  capacity_ = b.capacity;
  copied_ = b.copied;
}

PinnedStaging::PinnedStaging(PinnedStaging&& other) noexcept
    : device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      copied_(std::exchange(other.copied_, nullptr)) {}

PinnedStaging& PinnedStaging::operator=(PinnedStaging&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    copied_ = std::exchange(other.copied_, nullptr);
  }
  return *this;
}

PinnedStaging::~PinnedStaging() { release(); }

void PinnedStaging::release() {
  if (data_) pool().give_back({device_, data_, capacity_, copied_});
  data_ = nullptr;
}

void PinnedStaging::upload(void* device, std::size_t bytes, cudaStream_t stream) {
  HELIXMLA_CUDA_CHECK(cudaMemcpyAsync(device, data_, bytes, cudaMemcpyHostToDevice, stream));
  HELIXMLA_CUDA_CHECK(cudaEventRecord(copied_, stream));
}

}  // namespace helixmla::cuda

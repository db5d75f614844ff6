#if defined(HELIXMLA_WITH_CUDA)

#include "device_batch.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "helixmla/error.hpp"

namespace helixmla::testing {

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
  }
}
}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) check(cudaMalloc(&data_, bytes_), "cudaMalloc");
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}
void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "upload");
}
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "download");
}
void DeviceBuffer::fill_bytes(unsigned char value) {
  check(cudaMemset(data_, value, bytes_), "cudaMemset");
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

DeviceBatch::DeviceBatch(SyntheticBatch& host, int device) : host_(host), device_(device) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  q_ = DeviceBuffer(host_.q_.size());
  q_.upload(host_.q_.data(), host_.q_.size());
  pool_ = DeviceBuffer(host_.pool_.size());
  pool_.upload(host_.pool_.data(), host_.pool_.size());
  out_ = DeviceBuffer(host_.out_.size());
  stats_ = DeviceBuffer(host_.stats_.size() * sizeof(float));
  poison_outputs();
}

Problem DeviceBatch::problem() const {
  Problem p = host_.problem();
  p.location = Location::cuda(device_);
  p.q = q_.data();
  p.kv.pool = pool_.data();
  p.out = out_.data();
  if (p.stats.present()) p.stats.data = static_cast<float*>(stats_.data());
  return p;
}

void DeviceBatch::poison_outputs() {
  out_.fill_bytes(0xff);
  stats_.fill_bytes(0xff);  // all-ones float32 is NaN
}

void DeviceBatch::download_outputs() {
  check(cudaDeviceSynchronize(), "synchronize before download");
  out_.download(host_.out_.data(), host_.out_.size());
  stats_.download(host_.stats_.data(), host_.stats_.size() * sizeof(float));
}

}  // namespace helixmla::testing

#endif

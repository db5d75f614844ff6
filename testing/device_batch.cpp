#if defined(HELIXMLA_WITH_CUDA)

#include "device_batch.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "compare.hpp"
#include "core/env_integer.hpp"
#include "device_fill.hpp"
#include "helixmla/error.hpp"
#include "helixmla/reference.hpp"

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
  // The memset runs later, on the legacy default stream, which orders
  // nothing against non-blocking streams (the tests' and benchmarks'): a
  // kernel launched on one next could write its outputs before the fill
  // lands on them.
  check(cudaStreamSynchronize(cudaStreamLegacy), "cudaMemset");
}

namespace {
struct DeviceCount {
  int count = 0;
  std::string error;  // why the count could not be read, past "no driver" and "no device"
};
DeviceCount probe_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess) return {count, {}};
  cudaGetLastError();
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) return {};
  return {0, cudaGetErrorString(status)};
}
}  // namespace

int cuda_device_count() { return probe_devices().count; }

std::string missing_cuda_devices(int needed) {
  const DeviceCount found = probe_devices();
  if (found.count >= needed) return {};
  std::string why = "needs " + std::to_string(needed) + (needed == 1 ? " CUDA device" : " CUDA devices") +
                    ", found " + std::to_string(found.count);
  if (!found.error.empty()) why += " (cudaGetDeviceCount: " + found.error + ")";
  return why;
}

bool cuda_devices_required(int needed) {
  const char* text = std::getenv("HELIXMLA_REQUIRE_GPUS");
  if (text == nullptr || *text == '\0') return false;
  return needed <= parse_env_integer("HELIXMLA_REQUIRE_GPUS", text, 0);
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

namespace {
// Throws unless `device` still holds the `host` bytes it was given: a run
// reads Q and the KV pool only, and the reference was computed from these.
void expect_unchanged(const DeviceBuffer& device, const std::vector<std::byte>& host, const char* what) {
  std::vector<std::byte> now(host.size());
  device.download(now.data(), now.size());
  const auto [at, _] = std::mismatch(now.begin(), now.end(), host.begin());
  if (at != now.end()) {
    throw RuntimeFailure(std::string("the run wrote into its input ") + what + ": byte " +
                         std::to_string(at - now.begin()) + " of " + std::to_string(now.size()) +
                         " differs from what was uploaded");
  }
}
}  // namespace

void DeviceBatch::download_outputs() {
  check(cudaDeviceSynchronize(), "synchronize before download");
  out_.download(host_.out_.data(), host_.out_.size());
  stats_.download(host_.stats_.data(), host_.stats_.size() * sizeof(float));
  expect_unchanged(q_, host_.q_, "q");
  expect_unchanged(pool_, host_.pool_, "KV pool");
}

namespace {
BatchSpec metadata_only(BatchSpec spec) {
  spec.allocate_tensors = false;
  return spec;
}
}  // namespace

DeviceSyntheticBatch::DeviceSyntheticBatch(BatchSpec spec, int device)
    : meta_(metadata_only(spec)), device_(device) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  const auto& s = meta_.spec();
  const std::int64_t tokens = meta_.num_tokens();
  const std::int64_t q_count = tokens * s.heads * s.dims.head_dim();
  const std::int64_t pool_count = meta_.num_pages() * s.page_size * s.dims.head_dim();
  q_ = DeviceBuffer(static_cast<std::size_t>(q_count) * dtype_size(s.q_dtype));
  pool_ = DeviceBuffer(static_cast<std::size_t>(pool_count) * dtype_size(s.kv_dtype));
  out_ = DeviceBuffer(static_cast<std::size_t>(tokens * s.heads * s.dims.kv_lora_rank) * dtype_size(s.q_dtype));
  if (s.stats) stats_ = DeviceBuffer(static_cast<std::size_t>(tokens * s.heads * 2) * sizeof(float));
  const float kv_inverse_scale = s.kv_dtype == DType::fp8_e4m3 ? 1.0f / s.kv_scale : 1.0f;
  fill_random_device(q_.data(), s.q_dtype, q_count, 1.0f, 1.0f, s.seed);
  fill_random_device(pool_.data(), s.kv_dtype, pool_count, 1.0f, kv_inverse_scale, s.seed + 1);
  if (s.poison_unused_kv) {
    const std::size_t row_bytes = static_cast<std::size_t>(s.dims.head_dim()) * dtype_size(s.kv_dtype);
    auto* pool = static_cast<unsigned char*>(pool_.data());
    for (const auto& [first, end] : meta_.unused_kv_rows()) {
      check(cudaMemset(pool + static_cast<std::size_t>(first) * row_bytes, 0xff,
                       static_cast<std::size_t>(end - first) * row_bytes),
            "poison unused KV rows");
    }
  }
  out_.fill_bytes(0xff);
  if (s.stats) stats_.fill_bytes(0xff);
  check(cudaDeviceSynchronize(), "fill synthetic batch");
}

Problem DeviceSyntheticBatch::problem() {
  Problem p = meta_.problem();
  p.location = Location::cuda(device_);
  p.q = q_.data();
  p.kv.pool = pool_.data();
  p.out = out_.data();
  if (meta_.spec().stats) {
    p.stats.data = static_cast<float*>(stats_.data());
    p.stats.tokens = meta_.num_tokens();
    p.stats.heads = meta_.spec().heads;
    p.stats.width = 2;
  }
  return p;
}

void DeviceSyntheticBatch::poison_outputs(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  check(cudaMemsetAsync(out_.data(), 0xff, out_.bytes(), s), "poison outputs");
  if (stats_.bytes()) check(cudaMemsetAsync(stats_.data(), 0xff, stats_.bytes(), s), "poison stats");
}

void DeviceSyntheticBatch::download(std::vector<std::byte>& q, std::vector<std::byte>& pool,
                                    std::vector<std::byte>& out) const {
  check(cudaDeviceSynchronize(), "synchronize before download");
  q.resize(q_.bytes());
  pool.resize(pool_.bytes());
  out.resize(out_.bytes());
  q_.download(q.data(), q.size());
  pool_.download(pool.data(), pool.size());
  out_.download(out.data(), out.size());
}

double first_requests_rel_l2(DeviceSyntheticBatch& batch, std::int32_t requests) {
  std::vector<std::byte> q, pool, out;
  batch.download(q, pool, out);
  Problem p = batch.problem();
  const std::int32_t k = std::min(requests, p.num_requests());
  p.location = Location::host();
  p.q = q.data();
  p.kv.pool = pool.data();
  p.q_len = p.q_len.subspan(0, k);
  p.kv_len = p.kv_len.subspan(0, k);
  p.page_table = p.page_table.subspan(0, static_cast<std::size_t>(k) * p.page_table_stride);
  p.stats = {};
  const std::int64_t values = p.num_tokens() * p.num_heads * p.dims.kv_lora_rank;
  std::vector<std::byte> expected(static_cast<std::size_t>(values) * dtype_size(p.out_dtype));
  p.out = expected.data();
  reference_attention(p);
  std::vector<double> reference(static_cast<std::size_t>(values));
  for (std::int64_t i = 0; i < values; ++i) reference[i] = load_as_float(expected.data(), p.out_dtype, i);
  const Comparison c = compare(out.data(), p.out_dtype, reference);
  return c.non_finite ? std::numeric_limits<double>::infinity() : c.rel_l2_err;
}

}  // namespace helixmla::testing

#endif

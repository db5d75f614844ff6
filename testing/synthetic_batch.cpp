#include "synthetic_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "helixmla/error.hpp"

namespace helixmla::testing {

DType default_q_dtype(DType kv_dtype) {
  return kv_dtype == DType::fp16 ? DType::fp16 : DType::bf16;
}

float default_kv_scale(DType kv_dtype) { return kv_dtype == DType::fp8_e4m3 ? 1.0f / 64.0f : 1.0f; }

namespace {

void fill_random(std::vector<std::byte>& buffer, DType dtype, std::int64_t count, float amplitude,
                 float inverse_scale, std::mt19937_64& rng) {
  buffer.assign(static_cast<std::size_t>(count) * dtype_size(dtype), std::byte{0});
  std::uniform_real_distribution<float> uniform(-amplitude, amplitude);
  for (std::int64_t i = 0; i < count; ++i) {
    store_from_float(buffer.data(), dtype, i, uniform(rng) * inverse_scale);
  }
}

}  // namespace

HostFootprint host_footprint(const BatchSpec& spec) {
  HostFootprint footprint;
  if (spec.kv_len.empty() || spec.page_size <= 0) return footprint;
  const std::int64_t requests = static_cast<std::int64_t>(spec.contexts) + spec.generations;
  double pages = 0.0, tokens = 0.0;
  std::int64_t stride = 1;
  for (std::int64_t r = 0; r < requests; ++r) {
    const bool context = r < spec.contexts;
    const std::int64_t len =
        context ? spec.context_len : spec.kv_len[static_cast<std::size_t>(r - spec.contexts) % spec.kv_len.size()];
    const std::int64_t request_pages = (len + spec.page_size - 1) / spec.page_size;
    pages += static_cast<double>(request_pages);
    stride = std::max(stride, request_pages);
    tokens += context ? spec.context_len : spec.q_len;
  }
  pages += spec.spare_pages;
  footprint.page_table_bytes = static_cast<double>(requests) * static_cast<double>(stride) * 4.0 + pages * 4.0;
  if (!spec.allocate_tensors) return footprint;
  const double q_size = static_cast<double>(dtype_size(spec.q_dtype));
  footprint.tensor_bytes = tokens * spec.heads * spec.dims.head_dim() * q_size +
                           pages * spec.page_size * spec.dims.head_dim() * static_cast<double>(dtype_size(spec.kv_dtype)) +
                           tokens * spec.heads * spec.dims.kv_lora_rank * q_size +
                           (spec.stats ? tokens * spec.heads * 2 * 4.0 : 0.0);
  return footprint;
}

SyntheticBatch::SyntheticBatch(const BatchSpec& spec) : spec_(spec) {
  if (spec.kv_len.empty()) throw InvalidArgument("kv_len", -1, "[]", "needs at least one value");
  const std::int32_t requests = spec.contexts + spec.generations;
  for (std::int32_t r = 0; r < requests; ++r) {
    const bool context = r < spec.contexts;
    const std::int32_t g = r - spec.contexts;
    q_len_.push_back(context ? spec.context_len : spec.q_len);
    kv_len_.push_back(context ? spec.context_len
                              : spec.kv_len[static_cast<std::size_t>(g) % spec.kv_len.size()]);
  }
  std::int64_t used_pages = 0;
  std::int32_t stride = 1;
  for (std::int32_t len : kv_len_) {
    const std::int32_t pages = spec.page_size > 0 ? (len + spec.page_size - 1) / spec.page_size : 0;
    used_pages += pages;
    stride = std::max(stride, pages);
  }
  page_table_stride_ = stride;
  num_pages_ = used_pages + spec.spare_pages;
  num_tokens_ = std::accumulate(q_len_.begin(), q_len_.end(), std::int64_t{0});

  std::mt19937_64 rng(spec.seed);
  std::vector<std::int32_t> order(static_cast<std::size_t>(num_pages_));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  page_table_.assign(static_cast<std::size_t>(requests) * stride, -1);
  std::size_t next = 0;
  for (std::int32_t r = 0; r < requests; ++r) {
    const std::int32_t pages = (kv_len_[r] + spec.page_size - 1) / spec.page_size;
    for (std::int32_t b = 0; b < pages; ++b) {
      page_table_[static_cast<std::size_t>(r) * stride + b] = order[next++];
    }
  }

  softmax_scale_ = 1.0f / std::sqrt(192.0f);
  if (!spec.allocate_tensors) return;
  const std::int64_t head_dim = spec.dims.head_dim();
  const float kv_inverse_scale = spec.kv_dtype == DType::fp8_e4m3 ? 1.0f / spec.kv_scale : 1.0f;
  fill_random(q_, spec.q_dtype, num_tokens_ * spec.heads * head_dim, 1.0f, 1.0f, rng);
  fill_random(pool_, spec.kv_dtype, num_pages_ * spec.page_size * head_dim, 1.0f,
              kv_inverse_scale, rng);
  out_.assign(static_cast<std::size_t>(num_tokens_ * spec.heads * spec.dims.kv_lora_rank) *
                  dtype_size(spec.q_dtype),
              std::byte{0});
  if (spec.stats) stats_.assign(static_cast<std::size_t>(num_tokens_ * spec.heads * 2), 0.0f);
  poison_outputs();
}

void SyntheticBatch::poison_outputs() {
  std::memset(out_.data(), 0xff, out_.size());  // all-ones is NaN in bf16 and fp16
  std::fill(stats_.begin(), stats_.end(), std::numeric_limits<float>::quiet_NaN());
}

Problem SyntheticBatch::problem() {
  Problem p;
  p.dims = spec_.dims;
  p.num_heads = spec_.heads;
  p.softmax_scale = softmax_scale_;
  p.q_dtype = spec_.q_dtype;
  p.out_dtype = spec_.q_dtype;
  p.location = Location::host();
  p.q = q_.data();
  p.out = out_.data();
  if (spec_.stats) {
    p.stats.data = stats_.data();
    p.stats.tokens = num_tokens_;
    p.stats.heads = spec_.heads;
    p.stats.width = 2;
  }
  p.kv.pool = pool_.data();
  p.kv.num_pages = num_pages_;
  p.kv.page_size = spec_.page_size;
  p.kv.dtype = spec_.kv_dtype;
  p.kv.scale = spec_.kv_scale;
  p.num_contexts = spec_.contexts;
  p.q_len = q_len_;
  p.kv_len = kv_len_;
  p.page_table = page_table_;
  p.page_table_stride = page_table_stride_;
  return p;
}

}  // namespace helixmla::testing

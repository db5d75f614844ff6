#include "synthetic_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "helixmla/error.hpp"

namespace helixmla::testing {

DType default_q_dtype(DType kv_dtype) {
  return kv_dtype == DType::fp16 ? DType::fp16 : DType::bf16;
}

float default_kv_scale(DType kv_dtype) { return kv_dtype == DType::fp8_e4m3 ? 1.0f / 64.0f : 1.0f; }

void BatchSpec::use_kv_dtype(DType kv) {
  kv_dtype = kv;
  q_dtype = default_q_dtype(kv);
  kv_scale = default_kv_scale(kv);
}

namespace {

// Elements [first, end) of `buffer` drawn uniformly from [-amplitude,
// amplitude) and multiplied by `inverse_scale`.
void fill_random(std::vector<std::byte>& buffer, DType dtype, std::int64_t first, std::int64_t end,
                 float amplitude, float inverse_scale, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-amplitude, amplitude);
  for (std::int64_t i = first; i < end; ++i) {
    store_from_float(buffer.data(), dtype, i, uniform(rng) * inverse_scale);
  }
}

// Request r's (q_len, kv_len): contexts first, generations cycling kv_len.
std::pair<std::int32_t, std::int32_t> request_lengths(const BatchSpec& spec, std::int64_t r) {
  if (r < spec.contexts) return {spec.context_len, spec.context_len};
  return {spec.q_len, spec.kv_len[static_cast<std::size_t>(r - spec.contexts) % spec.kv_len.size()]};
}

// Sizes of the batch's metadata, for the constructor and host_footprint alike.
struct Layout {
  std::int64_t requests = 0;
  std::int64_t pages = 0;  // spare pages included
  std::int64_t stride = 1;  // page-table row: the longest request's pages, or wider
  std::int64_t tokens = 0;
  std::int64_t kv_positions = 0;  // every request's KV length, summed
  std::int64_t longest_kv = 0;
};

Layout layout_of(const BatchSpec& spec) {
  Layout layout;
  layout.stride = std::max<std::int64_t>(1, spec.page_table_stride);
  layout.requests = static_cast<std::int64_t>(spec.contexts) + spec.generations;
  for (std::int64_t r = 0; r < layout.requests; ++r) {
    const auto [q_len, kv_len] = request_lengths(spec, r);
    const std::int64_t pages = spec.page_size > 0 ? (kv_len + spec.page_size - 1) / spec.page_size : 0;
    layout.pages += pages;
    layout.stride = std::max(layout.stride, pages);
    layout.tokens += q_len;
    layout.kv_positions += kv_len;
    layout.longest_kv = std::max<std::int64_t>(layout.longest_kv, kv_len);
  }
  layout.pages += spec.spare_pages;
  return layout;
}

}  // namespace

HostFootprint host_footprint(const BatchSpec& spec) {
  HostFootprint footprint;
  if (spec.kv_len.empty() || spec.page_size <= 0) return footprint;
  const Layout layout = layout_of(spec);
  const auto pages = static_cast<double>(layout.pages);
  const auto tokens = static_cast<double>(layout.tokens);
  footprint.tokens = layout.tokens;
  footprint.kv_positions = layout.kv_positions;
  footprint.requests = layout.requests;
  footprint.longest_kv = layout.longest_kv;
  // The page table and the shuffled page order that fills it.
  footprint.page_table_bytes = static_cast<double>(layout.requests) * static_cast<double>(layout.stride) * 4.0 + pages * 4.0;
  if (!spec.allocate_tensors) return footprint;
  const double q_size = static_cast<double>(dtype_size(spec.q_dtype));
  footprint.tensor_bytes = tokens * spec.heads * spec.dims.head_dim() * q_size +
                           pages * spec.page_size * spec.dims.head_dim() * static_cast<double>(dtype_size(spec.kv_dtype)) +
                           tokens * spec.heads * spec.dims.kv_lora_rank * q_size +
                           (spec.stats ? tokens * spec.heads * 2 * 4.0 : 0.0);
  return footprint;
}

SyntheticBatch::SyntheticBatch(const BatchSpec& spec) : SyntheticBatch(spec, {}) {}

SyntheticBatch::SyntheticBatch(const BatchSpec& spec, const std::vector<std::int32_t>& page_table) : spec_(spec) {
  if (spec.kv_len.empty()) throw InvalidArgument("kv_len", -1, "[]", "needs at least one value");
  if (spec.page_size <= 0) throw InvalidArgument("page_size", -1, std::to_string(spec.page_size), "must be >= 1");
  const Layout layout = layout_of(spec);
  const auto requests = static_cast<std::int32_t>(layout.requests);
  for (std::int32_t r = 0; r < requests; ++r) {
    const auto [q_len, kv_len] = request_lengths(spec, r);
    q_len_.push_back(q_len);
    kv_len_.push_back(kv_len);
  }
  const auto stride = static_cast<std::int32_t>(layout.stride);
  page_table_stride_ = stride;
  num_pages_ = layout.pages;
  num_tokens_ = layout.tokens;

  std::mt19937_64 rng(spec.seed);
  std::vector<std::int32_t> order(static_cast<std::size_t>(num_pages_));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  page_table_.assign(static_cast<std::size_t>(requests) * stride, -1);
  std::size_t next = 0;
  for (std::int32_t r = 0; r < requests; ++r) {
    const std::int32_t pages = (kv_len_[r] + spec.page_size - 1) / spec.page_size;
    std::int32_t* row = page_table_.data() + static_cast<std::size_t>(r) * stride;
    for (std::int32_t b = 0; b < pages; ++b) row[b] = order[next++];
    for (std::int32_t b = pages; b < stride && spec.stale_page_ids; ++b) {
      const std::int64_t k = static_cast<std::int64_t>(r) * 7 + b;
      if (k % 3 == 0 && num_pages_ > 0) {
        row[b] = order[static_cast<std::size_t>(k % num_pages_)];
      } else if (k % 3 == 1) {
        row[b] = std::numeric_limits<std::int32_t>::max() - static_cast<std::int32_t>(k % 1000);
      } else {
        row[b] = -2 - static_cast<std::int32_t>(k % 1000);
      }
    }
  }
  const std::int32_t first_generation = spec.contexts;
  for (std::int32_t r = first_generation + 1; r < requests; ++r) {
    const std::int32_t whole = std::min(kv_len_[r], kv_len_[first_generation]) / spec.page_size;
    for (std::int32_t b = 0; b < std::min(spec.shared_prefix_pages, whole); ++b) {
      page_table_[static_cast<std::size_t>(r) * stride + b] =
          page_table_[static_cast<std::size_t>(first_generation) * stride + b];
    }
  }
  if (!page_table.empty()) {
    if (page_table.size() != page_table_.size()) {
      throw InvalidArgument("page_table", -1, std::to_string(page_table.size()),
                            "must hold " + std::to_string(page_table_.size()) + " entries, as the spec's own");
    }
    page_table_ = page_table;
  }

  softmax_scale_ = 1.0f / std::sqrt(192.0f);
  if (!spec.allocate_tensors) return;
  const std::int64_t head_dim = spec.dims.head_dim();
  const float kv_inverse_scale = spec.kv_dtype == DType::fp8_e4m3 ? 1.0f / spec.kv_scale : 1.0f;
  const std::int64_t q_count = num_tokens_ * spec.heads * head_dim;
  q_.assign(static_cast<std::size_t>(q_count) * dtype_size(spec.q_dtype), std::byte{0});
  fill_random(q_, spec.q_dtype, 0, q_count, 1.0f, 1.0f, rng);
  const std::int64_t pool_count = num_pages_ * spec.page_size * head_dim;
  // Poisoned from the start (0xff), then values only where a request reads:
  // a huge page with a short request costs its rows, not the page's.
  pool_.assign(static_cast<std::size_t>(pool_count) * dtype_size(spec.kv_dtype),
               spec.poison_unused_kv ? std::byte{0xff} : std::byte{0});
  if (spec.poison_unused_kv) {
    std::int64_t next = 0;
    for (const auto& [first, end] : unused_kv_rows()) {
      fill_random(pool_, spec.kv_dtype, next * head_dim, first * head_dim, 1.0f, kv_inverse_scale, rng);
      next = end;
    }
    fill_random(pool_, spec.kv_dtype, next * head_dim, pool_count, 1.0f, kv_inverse_scale, rng);
  } else {
    fill_random(pool_, spec.kv_dtype, 0, pool_count, 1.0f, kv_inverse_scale, rng);
  }
  out_.assign(static_cast<std::size_t>(num_tokens_ * spec.heads * spec.dims.kv_lora_rank) *
                  dtype_size(spec.q_dtype),
              std::byte{0});
  if (spec.stats) stats_.assign(static_cast<std::size_t>(num_tokens_ * spec.heads * 2), 0.0f);
  poison_outputs();
}

std::vector<std::pair<std::int64_t, std::int64_t>> SyntheticBatch::unused_kv_rows() const {
  const std::int64_t head_dim = spec_.dims.head_dim();
  std::vector<bool> used(static_cast<std::size_t>(num_pages_ * spec_.page_size), false);
  for (std::int32_t r = 0; r < static_cast<std::int32_t>(kv_len_.size()); ++r) {
    for (std::int32_t position = 0; position < kv_len_[r]; ++position) {
      used[static_cast<std::size_t>(pool_row(r, position) / head_dim)] = true;
    }
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (std::int64_t row = 0; row < static_cast<std::int64_t>(used.size()); ++row) {
    if (used[static_cast<std::size_t>(row)]) continue;
    if (!runs.empty() && runs.back().second == row) {
      ++runs.back().second;
    } else {
      runs.emplace_back(row, row + 1);
    }
  }
  return runs;
}

std::int64_t SyntheticBatch::pool_row(std::int32_t request, std::int32_t position) const {
  const std::int64_t page =
      page_table_[static_cast<std::size_t>(request) * static_cast<std::size_t>(page_table_stride_) +
                  static_cast<std::size_t>(position / spec_.page_size)];
  return (page * spec_.page_size + position % spec_.page_size) * spec_.dims.head_dim();
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

SyntheticBatch another_layer(const SyntheticBatch& first, int index) {
  BatchSpec spec = first.spec();
  spec.seed += 1000 * static_cast<std::uint64_t>(index);
  spec.kv_scale = first.spec().kv_scale * (1.0f + 0.5f * static_cast<float>(index));
  return SyntheticBatch(spec, first.page_table_);
}

}  // namespace helixmla::testing

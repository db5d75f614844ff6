// Random batches in host memory for tests, the command-line program and
// benchmarks. Pages are handed out in a shuffled order so requests never sit
// in neighbouring pages by accident; unused page-table slots hold stale ids
// (BatchSpec::stale_page_ids), or -1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "helixmla/problem.hpp"

namespace helixmla::testing {

struct BatchSpec {
  MlaDims dims;
  std::int32_t heads = 16;
  std::int32_t generations = 4;
  std::int32_t q_len = 1;                      // of every generation
  std::vector<std::int32_t> kv_len = {1024};   // per generation, cycled
  std::int32_t contexts = 0;
  std::int32_t context_len = 64;               // new tokens (= KV) of each context
  std::int32_t page_size = 64;
  DType kv_dtype = DType::bf16;
  DType q_dtype = DType::bf16;
  float kv_scale = 1.0f;                       // value = stored * kv_scale (fp8 stores value / kv_scale)
  bool stats = false;
  std::int32_t spare_pages = 3;                // pool pages no request uses
  // Page-table row width at least this: an engine's fixed-width table, the
  // same from one decode step to the next.
  std::int32_t page_table_stride = 0;
  // What a row holds past a request's pages. Engines leave stale entries
  // there (ids of pages now someone else's, or freed), which no backend may
  // read: true fills those slots with a mix of ids of pool pages (other
  // requests' among them), ids past the pool and negative ids; false with -1.
  bool stale_page_ids = true;
  std::uint64_t seed = 1;
  bool allocate_tensors = true;                // false: metadata only, tensor pointers null
  // A prefix cache: every generation after the first lists the first
  // generation's first pages (at most this many, and only pages both fill
  // whole) in place of its own, which stay unused. 0: no page is shared.
  std::int32_t shared_prefix_pages = 0;
  // Pool rows no request can see (the tails of last pages, spare pages) hold
  // NaN in every KV dtype, as unwritten cache memory may: a kernel that lets
  // a row past kv_len reach its output (0 x NaN in P V) fails.
  bool poison_unused_kv = true;

  // KV of `kv` with Q in its default dtype and its default scale (below).
  void use_kv_dtype(DType kv);
};

// Default Q dtype for a KV dtype: bf16 unless the cache is fp16.
DType default_q_dtype(DType kv_dtype);

// Default KV scale for a KV dtype: 1/64 for fp8, so that the dequantisation
// scale is exercised and values in [-1, 1] are stored up to 64, well inside
// e4m3's range with its full 3-bit mantissa; 1 otherwise.
float default_kv_scale(DType kv_dtype);

// Host bytes a SyntheticBatch of `spec` allocates, computed without
// allocating: its page table (always) and its tensors (Q, KV pool with the
// spare pages, out, stats) when spec.allocate_tensors.
struct HostFootprint {
  std::int64_t tokens = 0;  // query tokens of the batch
  std::int64_t kv_positions = 0;  // the requests' KV lengths, summed
  std::int64_t requests = 0;
  std::int64_t longest_kv = 0;  // the longest request's KV length
  double page_table_bytes = 0.0;
  double tensor_bytes = 0.0;
};
HostFootprint host_footprint(const BatchSpec& spec);

class SyntheticBatch {
 public:
  explicit SyntheticBatch(const BatchSpec& spec);
  // The same with `page_table` (the size `spec`'s own would have) in place
  // of the shuffled one: what is drawn and poisoned follows that table.
  SyntheticBatch(const BatchSpec& spec, const std::vector<std::int32_t>& page_table);

  // View with pointers into this object's host buffers.
  Problem problem();
  // Fills outputs and stats with NaN so unwritten elements cannot pass.
  void poison_outputs();
  // Pool rows no request sees, as [first, end) runs of row indices, in order.
  std::vector<std::pair<std::int64_t, std::int64_t>> unused_kv_rows() const;
  // Element index in pool_ of the first value of request `request`'s cached
  // row at KV position `position` (head_dim values follow).
  std::int64_t pool_row(std::int32_t request, std::int32_t position) const;

  const BatchSpec& spec() const { return spec_; }
  std::int64_t num_tokens() const { return num_tokens_; }
  std::int64_t num_pages() const { return num_pages_; }
  std::size_t q_bytes() const { return q_.size(); }
  std::size_t pool_bytes() const { return pool_.size(); }
  std::size_t out_bytes() const { return out_.size(); }

  std::vector<std::byte> q_, pool_, out_;
  std::vector<float> stats_;
  std::vector<std::int32_t> q_len_, kv_len_, page_table_;
  std::int32_t page_table_stride_ = 0;
  float softmax_scale_ = 0.0f;

 private:
  BatchSpec spec_;
  std::int64_t num_tokens_ = 0;
  std::int64_t num_pages_ = 0;
};

// Layer `index` (>= 1) of the decode step whose first layer is `first`: Q
// and KV values of its own and a KV scale of its own (first's x (1 + index
// / 2)), the same lengths and page table, so that a run prepared for
// `first` runs it too (PreparedRun::enqueue with its LayerTensors).
SyntheticBatch another_layer(const SyntheticBatch& first, int index);

}  // namespace helixmla::testing

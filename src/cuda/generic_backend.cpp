#include "cuda/generic_backend.hpp"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "cuda/capture_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_guard.hpp"
#include "cuda/generic_kernel.cuh"
#include "cuda/generic_work_plan.hpp"
#include "cuda/layer_bound_run.hpp"
#include "cuda/run_memory.hpp"
#include "cuda/sm_count.hpp"
#include "cuda/split_combine.hpp"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

constexpr std::string_view kName = "cuda_generic";
constexpr const char* kHostMemory = "tensors are in host memory";

bool is_half(DType dtype) { return dtype == DType::bf16 || dtype == DType::fp16; }

// The precompiled (query, KV) pairs; the output dtype is the query's.
bool has_kernel(DType q_dtype, DType kv_dtype) {
  return is_half(q_dtype) && (kv_dtype == q_dtype || kv_dtype == DType::fp8_e4m3);
}

std::string variant_name(DType q_dtype, DType kv_dtype) {
  return fmt::format("generic_q-{}_kv-{}", to_string(q_dtype), to_string(kv_dtype));
}

Verdict check_dims(const MlaDims& dims) {
  const std::int32_t rank = dims.kv_lora_rank;
  const std::int32_t rope = dims.rope_dim;
  if (rank < 16 || rank > kGenericMaxRank || rank % 16 != 0) {
    return Verdict::no(fmt::format("kv_lora_rank {} unsupported: needs a multiple of 16 in [16, {}]", rank,
                                   kGenericMaxRank));
  }
  if (rope < 0 || rope % 16 != 0 || rank + rope > kGenericMaxHeadDim) {
    return Verdict::no(fmt::format("rope_dim {} unsupported: needs a multiple of 16 with kv_lora_rank + "
                                   "rope_dim <= {}",
                                   rope, kGenericMaxHeadDim));
  }
  return Verdict::yes();
}

class GenericCatalog final : public KernelCatalog {
 public:
  std::vector<KernelVariant> inventory(const Environment&) const override {
    std::vector<KernelVariant> variants;
    for (DType q_dtype : {DType::bf16, DType::fp16}) {
      for (DType kv_dtype : {DType::bf16, DType::fp16, DType::fp8_e4m3}) {
        if (has_kernel(q_dtype, kv_dtype)) variants.push_back({variant_name(q_dtype, kv_dtype), true});
      }
    }
    return variants;
  }

  // One kernel per dtype pair runs every page size, head count, q_len,
  // mask bound and dims the backend's check admits.
  Verdict can_implement(const PhaseShape& shape, const Environment&, KernelVariant* chosen) const override {
    if (!has_kernel(shape.q_dtype, shape.kv_dtype)) {
      return Verdict::no(fmt::format("no precompiled kernel for q {} with kv {}", to_string(shape.q_dtype),
                                     to_string(shape.kv_dtype)));
    }
    const std::string name = variant_name(shape.q_dtype, shape.kv_dtype);
    if (chosen) *chosen = {name, true};
    return Verdict::yes(name);
  }
};

constexpr TensorAlignment kAlignment{"the generic kernel", 4, 16, 4, 4};

// A prepared phase: its memory (run_memory.hpp) and launch arguments.
class GenericRun final : public LayerBoundRun {
 public:
  GenericRun(int device, const LayerTensors& prepared, float softmax_scale)
      : LayerBoundRun(prepared, kAlignment), device_(device), softmax_scale_(softmax_scale) {}

  RunMemory& memory() { return memory_; }

  // Launch arguments without the tensors.
  void bind(GenericKernelParams params, SplitCombineArgs combine) {
    params_ = params;
    combine_ = combine;
  }

 private:
  void launch(const LayerTensors& layer, void* stream) const override {
    DeviceGuard guard(device_);
    const auto s = static_cast<cudaStream_t>(stream);
    GenericKernelParams params = params_;
    params.q = layer.q;
    params.out = layer.out;
    params.stats = layer.stats;
    params.pool = layer.kv_pool;
    params.score_scale = softmax_scale_ * layer.kv_scale * static_cast<float>(M_LOG2E);
    params.value_scale = layer.kv_scale;
    SplitCombineArgs combine = combine_;
    combine.out = layer.out;
    combine.stats = layer.stats;
    launch_generic_attention(params, s);
    launch_split_combine(combine, s);
  }

  int device_;
  float softmax_scale_;
  GenericKernelParams params_;
  SplitCombineArgs combine_;
  RunMemory memory_;
};

class GenericBackend final : public Backend {
 public:
  std::string_view name() const override { return kName; }
  int priority() const override { return 50; }

  Verdict available(const Environment& env) const override {
    if (!env.built(kName)) return Verdict::no("not built: the library was compiled without CUDA");
    if (env.arch == Arch::none) return Verdict::no("no CUDA GPU (needs sm80 or newer)");
    if (env.arch < Arch::sm80) {
      return Verdict::no(fmt::format("GPU architecture {} is older than sm80 (cp.async)", to_string(env.arch)));
    }
    return Verdict::yes("SIMT kernel for sm80 and newer");
  }

  // Pure function of the shape: every page size >= 1, 1..128 heads, any
  // q_len (linear verify-group mask or Helix bounds), stats, split-KV.
  // dims: kv_lora_rank a multiple of 16 in [16, 512], rope_dim a multiple
  // of 16, kv_lora_rank + rope_dim <= 576.
  Verdict check(const PhaseShape& shape) const override {
    if (!shape.on_device) return Verdict::no(kHostMemory);
    if (Verdict dims = check_dims(shape.dims); !dims) return dims;
    if (!is_half(shape.q_dtype)) {
      return Verdict::no(fmt::format("q_dtype {} unsupported: bf16 or fp16", to_string(shape.q_dtype)));
    }
    if (shape.out_dtype != shape.q_dtype) {
      return Verdict::no(fmt::format("out_dtype {} must equal q_dtype {}", to_string(shape.out_dtype),
                                     to_string(shape.q_dtype)));
    }
    if (!is_half(shape.kv_dtype) && shape.kv_dtype != DType::fp8_e4m3) {
      return Verdict::no(fmt::format("kv dtype {} unsupported: bf16, fp16 or fp8", to_string(shape.kv_dtype)));
    }
    if (is_half(shape.kv_dtype) && shape.kv_dtype != shape.q_dtype) {
      return Verdict::no(fmt::format("{} KV needs {} queries, got {}", to_string(shape.kv_dtype),
                                     to_string(shape.kv_dtype), to_string(shape.q_dtype)));
    }
    if (shape.num_heads < 1 || shape.num_heads > 128) {
      return Verdict::no(fmt::format("{} heads unsupported: 1..128", shape.num_heads));
    }
    if (shape.page_size < 1) return Verdict::no(fmt::format("page size {} < 1", shape.page_size));
    if (shape.mask != MaskKind::linear) {
      return Verdict::no("only the linear verify-group mask (or Helix bounds) is implemented");
    }
    if (shape.beam_width != 1) {
      return Verdict::no(fmt::format("beam width {}: beam search KV indirection is not implemented",
                                     shape.beam_width));
    }
    if (shape.has_stats && !shape.stats_fp32_contiguous) {
      return Verdict::no("statistics must be float32 [tokens, heads, 2]");
    }
    return Verdict::yes();
  }

  const KernelCatalog& catalog() const override { return catalog_; }

  // The plan depends on the device's SM count, read once per device and
  // cached (the only CUDA call here, and not a stream operation).
  std::size_t workspace_bytes(const Problem& phase) const override {
    const GenericWorkPlan plan = plan_generic_work(phase, device_sm_count(phase.location.device));
    return generic_workspace_layout(plan, phase).total_bytes;
  }

  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace workspace, void* stream) const override {
    if (phase.location.kind != Location::Kind::cuda) throw InvalidArgument("location", -1, "host", kHostMemory);
    require_tensor_alignment(layer_tensors(phase), kAlignment, false);
    if (workspace.data != nullptr) require_alignment("workspace.data", workspace.data, 16, kAlignment.backend);
    const int device = phase.location.device;
    DeviceGuard guard(device);
    refuse_capturing_stream(static_cast<cudaStream_t>(stream));

    const GenericWorkPlan plan = plan_generic_work(phase, device_sm_count(device));
    const GenericWorkspaceLayout layout = generic_workspace_layout(plan, phase);
    if (workspace.data != nullptr && workspace.bytes < layout.total_bytes) {
      throw InvalidArgument("workspace.bytes", -1, std::to_string(workspace.bytes),
                            fmt::format("needs {} bytes", layout.total_bytes));
    }

    auto run = std::make_unique<GenericRun>(device, layer_tensors(phase), phase.softmax_scale);
    auto* base = static_cast<unsigned char*>(run->memory().workspace(workspace.data, layout.total_bytes));
    unsigned char* staging = run->memory().staging(layout.metadata_bytes);
    const auto stage = [&](std::size_t offset, const auto& values) {
      if (!values.empty()) std::memcpy(staging + offset, values.data(), values.size() * sizeof(values[0]));
    };
    stage(layout.segments, plan.segments);
    stage(layout.items, plan.items);
    stage(layout.token_bounds, plan.token_bounds);
    stage(layout.page_table, phase.page_table);
    run->memory().upload(base, layout.metadata_bytes, static_cast<cudaStream_t>(stream));
    configure_generic_attention(phase.q_dtype, phase.kv.dtype);

    GenericKernelParams params;
    params.page_size = phase.kv.page_size;
    params.num_heads = phase.num_heads;
    params.head_dim = phase.dims.head_dim();
    params.kv_lora_rank = phase.dims.kv_lora_rank;
    params.q_dtype = phase.q_dtype;
    params.kv_dtype = phase.kv.dtype;
    params.items = reinterpret_cast<const GenericWorkItem*>(base + layout.items);
    params.num_items = static_cast<std::int32_t>(plan.items.size());
    params.page_table = reinterpret_cast<const std::int32_t*>(base + layout.page_table);
    params.page_table_stride = phase.page_table_stride;
    params.token_bounds = reinterpret_cast<const std::int32_t*>(base + layout.token_bounds);
    params.partial_out = reinterpret_cast<float*>(base + layout.partial_out);
    params.partial_stats = reinterpret_cast<float*>(base + layout.partial_stats);

    SplitCombineArgs combine;
    combine.segments = reinterpret_cast<const SplitSegment*>(base + layout.segments);
    combine.num_segments = static_cast<std::int32_t>(plan.segments.size());
    combine.total_rows = plan.split_rows;
    combine.wide_rows = plan.wide_split_rows;
    combine.partial_out = params.partial_out;
    combine.partial_stats = params.partial_stats;
    combine.kv_lora_rank = phase.dims.kv_lora_rank;
    combine.out_dtype = phase.out_dtype;
    run->bind(params, combine);
    return run;
  }

 private:
  GenericCatalog catalog_;
};

}  // namespace

BackendPtr make_generic_backend() { return std::make_shared<const GenericBackend>(); }

}  // namespace helixmla::cuda

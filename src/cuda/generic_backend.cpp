#include "cuda/generic_backend.hpp"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "cuda/block_schedule.hpp"
#include "cuda/capture_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_guard.hpp"
#include "cuda/generic_kernel.cuh"
#include "cuda/generic_work_plan.hpp"
#include "cuda/layer_bound_run.hpp"
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

// A phase's plan, its workspace layout and its launch arguments besides the
// tensors (bound at each launch), with the metadata at `base`.
struct GenericLaunch {
  GenericWorkPlan plan;
  GenericWorkspaceLayout layout;
  GenericKernelParams params;
  SplitCombineArgs combine;
};

// The layout and base-independent arguments of `phase` under `plan`.
GenericLaunch launch_for(const Problem& phase, GenericWorkPlan plan) {
  GenericLaunch g;
  g.plan = std::move(plan);
  g.layout = generic_workspace_layout(g.plan, phase);
  GenericKernelParams& params = g.params;
  params.page_size = phase.kv.page_size;
  params.num_heads = phase.num_heads;
  params.head_dim = phase.dims.head_dim();
  params.kv_lora_rank = phase.dims.kv_lora_rank;
  params.q_dtype = phase.q_dtype;
  params.kv_dtype = phase.kv.dtype;
  params.num_items = static_cast<std::int32_t>(g.plan.items.size());
  params.page_table_stride = phase.page_table_stride;
  SplitCombineArgs& combine = g.combine;
  combine.num_segments = static_cast<std::int32_t>(g.plan.segments.size());
  combine.total_rows = g.plan.split_rows;
  combine.wide_rows = g.plan.wide_split_rows;
  combine.kv_lora_rank = phase.dims.kv_lora_rank;
  combine.out_dtype = phase.out_dtype;
  return g;
}

// Points the launch at its metadata and partials in the workspace at `base`.
void place(GenericLaunch& g, unsigned char* base) {
  g.params.items = reinterpret_cast<const GenericWorkItem*>(base + g.layout.items);
  g.params.page_table = reinterpret_cast<const std::int32_t*>(base + g.layout.page_table);
  g.params.token_bounds = reinterpret_cast<const std::int32_t*>(base + g.layout.token_bounds);
  g.params.partial_out = reinterpret_cast<float*>(base + g.layout.partial_out);
  g.params.partial_stats = reinterpret_cast<float*>(base + g.layout.partial_stats);
  g.combine.segments = reinterpret_cast<const SplitSegment*>(base + g.layout.segments);
  g.combine.partial_out = g.params.partial_out;
  g.combine.partial_stats = g.params.partial_stats;
}

GenericLaunch generic_launch_of(const Problem& phase, GenericWorkPlan plan, unsigned char* base) {
  GenericLaunch g = launch_for(phase, std::move(plan));
  place(g, base);
  return g;
}

// The phase's own plan.
GenericWorkPlan plan_of(const Problem& phase) {
  return plan_generic_work(phase, device_sm_count(phase.location.device));
}

// Whether two launches are the same kernel calls once their tensors are
// bound alike: what a captured enqueue needs of a refreshed run.
bool same_launch(const GenericLaunch& a, const GenericLaunch& b) {
  const GenericKernelParams& p = a.params;
  const GenericKernelParams& q = b.params;
  return p.page_size == q.page_size && p.num_heads == q.num_heads && p.head_dim == q.head_dim &&
         p.kv_lora_rank == q.kv_lora_rank && p.q_dtype == q.q_dtype && p.kv_dtype == q.kv_dtype &&
         p.items == q.items && p.num_items == q.num_items && p.page_table == q.page_table &&
         p.page_table_stride == q.page_table_stride && p.token_bounds == q.token_bounds &&
         p.partial_out == q.partial_out && p.partial_stats == q.partial_stats &&
         same_combine_launch(a.combine, b.combine);
}

// Writes the plan's metadata and the phase's page table at their offsets of
// the launch's layout.
void stage_metadata(unsigned char* staging, const GenericLaunch& g, const Problem& phase) {
  const auto stage = [&](std::size_t offset, const auto& values) {
    if (!values.empty()) std::memcpy(staging + offset, values.data(), values.size() * sizeof(values[0]));
  };
  stage(g.layout.segments, g.plan.segments);
  stage(g.layout.items, g.plan.items);
  stage(g.layout.token_bounds, g.plan.token_bounds);
  stage(g.layout.page_table, phase.page_table);
}

// A prepared phase: its launch.
class GenericRun final : public LayerBoundRun {
 public:
  explicit GenericRun(const Problem& phase) : LayerBoundRun(phase, kAlignment) {}

  // The workspace (the caller's, or the run's own of `bytes`) and the
  // planned launch of `phase` placed there, its metadata uploaded.
  void take(const Problem& phase, GenericLaunch planned, void* given, std::size_t bytes, void* stream) {
    bind_workspace(given, bytes);
    launch_ = std::move(planned);
    place(launch_, workspace());
    upload(launch_, phase, stream);
  }

 private:
  Refresh take_metadata(const Problem& next) override {
    std::optional<GenericLaunch> taken = launch_to_take(next);
    if (!taken) return {};
    return [this, next, g = std::move(*taken)](void* stream) {
      upload(g, next, stream);
      launch_ = g;
    };
  }
  void upload(const GenericLaunch& g, const Problem& phase, void* stream) {
    upload_metadata(
        g.layout.metadata_bytes, [&](unsigned char* staging) { stage_metadata(staging, g, phase); }, stream);
  }

  // A step's own plan when it launches as the prepared one; else the run's
  // split counts kept for it, when they launch alike and keeping them pays
  // (block_schedule.hpp).
  std::optional<GenericLaunch> launch_to_take(const Problem& next) const {
    GenericLaunch best = generic_launch_of(next, plan_of(next), workspace());
    if (launches_alike(best)) return best;
    std::optional<GenericWorkPlan> kept = plan_generic_work_keeping_splits(next, launch_.plan);
    if (!kept) return std::nullopt;
    GenericLaunch k = generic_launch_of(next, std::move(*kept), workspace());
    const int sms = device_sm_count(device());
    if (!launches_alike(k) ||
        !keeping_splits_pays(estimated_finish(k.plan, sms), estimated_finish(best.plan, sms))) {
      return std::nullopt;
    }
    return k;
  }
  bool launches_alike(const GenericLaunch& g) const {
    return g.layout.total_bytes <= capacity() && same_launch(g, launch_);
  }

  void launch(const LayerTensors& layer, void* stream) const override {
    DeviceGuard guard(device());
    const auto s = static_cast<cudaStream_t>(stream);
    GenericKernelParams params = launch_.params;
    params.q = layer.q;
    params.out = layer.out;
    params.stats = layer.stats;
    params.pool = layer.kv_pool;
    params.score_scale = softmax_scale() * layer.kv_scale * static_cast<float>(M_LOG2E);
    params.value_scale = layer.kv_scale;
    SplitCombineArgs combine = launch_.combine;
    combine.out = layer.out;
    combine.stats = layer.stats;
    launch_generic_attention(params, s);
    launch_split_combine(combine, s);
  }

  GenericLaunch launch_;
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
    if (Verdict aligned = check_alignment(shape.alignment, kAlignment); !aligned) return aligned;
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
    return generic_workspace_layout(plan_of(phase), phase).total_bytes;
  }

  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace workspace, void* stream) const override {
    if (phase.location.kind != Location::Kind::cuda) throw InvalidArgument("location", -1, "host", kHostMemory);
    require_tensor_alignment(layer_tensors(phase), kAlignment, false);
    if (workspace.data != nullptr) require_alignment("workspace.data", workspace.data, 16, kAlignment.backend);
    const int device = phase.location.device;
    const MetadataUploadScope scope(stream, device);

    GenericLaunch planned = launch_for(phase, plan_of(phase));
    const std::size_t needed = planned.layout.total_bytes;
    if (workspace.data != nullptr && workspace.bytes < needed) {
      throw InvalidArgument("workspace.bytes", -1, std::to_string(workspace.bytes),
                            fmt::format("needs {} bytes", needed));
    }
    configure_generic_attention(phase.q_dtype, phase.kv.dtype);
    auto run = std::make_unique<GenericRun>(phase);
    run->take(phase, std::move(planned), workspace.data, workspace.data != nullptr ? workspace.bytes : needed,
              stream);
    return run;
  }

 private:
  GenericCatalog catalog_;
};

}  // namespace

BackendPtr make_generic_backend() { return std::make_shared<const GenericBackend>(); }

}  // namespace helixmla::cuda

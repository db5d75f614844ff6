#include "cuda/tensorcore_run.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "cuda/capture_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_guard.hpp"
#include "cuda/layer_bound_run.hpp"
#include "cuda/once_per_key.hpp"
#include "cuda/sm_count.hpp"
#include "cuda/split_combine.hpp"
#include "cuda/tensorcore_jit.hpp"
#include "cuda/tensorcore_kernel.cuh"
#include "cuda/tensorcore_plan.hpp"
#include "cuda/tensorcore_precompiled.hpp"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

// A launchable kernel: a precompiled host stub or a just-in-time function.
struct Kernel {
  const void* stub = nullptr;
  CUfunction function = nullptr;
  int smem_bytes = 0;
  int threads = 0;
};

// A producer kernel's setmaxnreg split needs the launch's whole register
// share at entry: with fewer, the matrix warpgroups' setmaxnreg.inc would
// wait forever, so a build that gave fewer is refused here, not hung.
void check_producer_registers(const TensorcoreVariant& variant, const Kernel& k, int registers) {
  if (k.threads > helixmla_tc::kThreads && registers < helixmla_tc::kProducerLaunchRegisters) {
    throw RuntimeFailure(fmt::format(
        "tensor-core variant {} was built with {} registers a thread; its producer warpgroup's register "
        "split needs {} (a launch would hang)",
        variant.name(), registers, helixmla_tc::kProducerLaunchRegisters));
  }
}

Kernel resolve_kernel(const TensorcoreVariant& variant) {
  Kernel k;
  k.smem_bytes = variant.smem_bytes();
  k.threads = variant.block_threads();
  if (const void* stub = tensorcore_precompiled_kernel(variant)) {
    HELIXMLA_CUDA_CHECK(
        cudaFuncSetAttribute(stub, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_bytes));
    cudaFuncAttributes attributes{};
    HELIXMLA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, stub));
    k.stub = stub;
    check_producer_registers(variant, k, attributes.numRegs);
    return k;
  }
  if (variant.precompiled()) {
    throw RuntimeFailure("tensor-core variant " + variant.name() +
                         " is listed as precompiled but missing from the library");
  }
  k.function = tensorcore_jit_function(variant, k.smem_bytes);
  check_producer_registers(variant, k, jit_kernel_registers(k.function));
  return k;
}

// The variant's kernel on the current device, resolved once (its
// shared-memory attribute set, its registers checked): prepare runs every
// step, and both belong to the kernel, not to the step.
Kernel kernel_for(const TensorcoreVariant& variant) {
  static OncePerKey<std::pair<int, std::string>, Kernel> resolved;
  int device = 0;
  HELIXMLA_CUDA_CHECK(cudaGetDevice(&device));
  return resolved.get({device, variant.name()}, [&] { return resolve_kernel(variant); });
}

// A phase's launch arguments besides its tensors (bound at each launch).
struct TensorcoreLaunch {
  helixmla_tc::Params params{};
  SplitCombineArgs combine;
  unsigned blocks = 0;
};

// Whether two launches are the same kernel calls once their tensors are
// bound alike: what a captured enqueue needs of a refreshed run.
bool same_launch(const TensorcoreLaunch& a, const TensorcoreLaunch& b) {
  const helixmla_tc::Params& p = a.params;
  const helixmla_tc::Params& q = b.params;
  return a.blocks == b.blocks && p.page_table == q.page_table && p.token_bounds == q.token_bounds &&
         p.items == q.items && p.partial_out == q.partial_out && p.partial_stats == q.partial_stats &&
         p.page_table_stride == q.page_table_stride && p.heads == q.heads &&
         same_combine_launch(a.combine, b.combine);
}

// The launch of `phase` under `plan` with its metadata at `base`.
TensorcoreLaunch launch_of(const Problem& phase, const TensorcorePlan& plan, unsigned char* base) {
  TensorcoreLaunch launch;
  helixmla_tc::Params& params = launch.params;
  params.page_table = reinterpret_cast<const int*>(base + plan.page_table_offset);
  params.token_bounds = phase.helix.token_kv_bounds.empty()
                            ? nullptr
                            : reinterpret_cast<const int*>(base + plan.bounds_offset);
  params.items = reinterpret_cast<const helixmla_tc::WorkItem*>(base + plan.items_offset);
  params.partial_out = reinterpret_cast<float*>(base + plan.partial_out_offset);
  params.partial_stats = reinterpret_cast<float*>(base + plan.partial_stats_offset);
  params.page_table_stride = phase.page_table_stride;
  params.heads = phase.num_heads;

  SplitCombineArgs& combine = launch.combine;
  combine.segments = reinterpret_cast<const SplitSegment*>(base + plan.segments_offset);
  combine.num_segments = static_cast<std::int32_t>(plan.segments.size());
  combine.total_rows = plan.split_rows;
  combine.wide_rows = plan.wide_split_rows;
  combine.partial_out = params.partial_out;
  combine.partial_stats = params.partial_stats;
  combine.kv_lora_rank = helixmla_tc::kLatent;
  combine.out_dtype = phase.out_dtype;
  launch.blocks = static_cast<unsigned>(plan.items.size());
  return launch;
}

// Writes the plan's metadata and the phase's page table and bounds at their
// offsets of the plan's metadata layout.
void stage_metadata(unsigned char* staging, const TensorcorePlan& plan, const Problem& phase) {
  const auto put = [staging](std::size_t offset, const void* data, std::size_t bytes) {
    if (bytes > 0) std::memcpy(staging + offset, data, bytes);
  };
  put(plan.items_offset, plan.items.data(), plan.items.size() * sizeof(helixmla_tc::WorkItem));
  put(plan.segments_offset, plan.segments.data(), plan.segments.size() * sizeof(SplitSegment));
  put(plan.bounds_offset, phase.helix.token_kv_bounds.data(),
      phase.helix.token_kv_bounds.size() * sizeof(std::int32_t));
  put(plan.page_table_offset, phase.page_table.data(), phase.page_table.size() * sizeof(std::int32_t));
}

std::int32_t parallel_blocks(const Problem& phase, const TensorcoreVariant& variant) {
  return tensorcore_block_slots(device_sm_count(phase.location.device), variant);
}

// A prepared phase: its kernel, plan and launch.
class TensorcoreRun final : public LayerBoundRun {
 public:
  TensorcoreRun(const Problem& phase, const TensorcoreVariant& variant, Kernel kernel)
      : LayerBoundRun(phase, kTensorcoreAlignment),
        variant_(variant),
        kernel_(kernel),
        pool_rows_(phase.kv.num_pages * phase.kv.page_size) {}

  // The workspace (the caller's, or the run's own of `bytes`) and the
  // launch of `phase` under `plan` with its metadata there, uploaded.
  void take(const Problem& phase, std::shared_ptr<const TensorcorePlan> plan, void* given, std::size_t bytes,
            void* stream) {
    bind_workspace(given, bytes);
    launch_ = launch_of(phase, *plan, workspace());
    upload(*plan, phase, stream);
    plan_ = std::move(plan);
  }

 private:
  Refresh take_metadata(const Problem& next) override {
    if (tensorcore_variant_of(next) != variant_) return {};
    // A captured launch holds the tensor map: a pool of another extent
    // needs a new one, so a new prepare (and capture).
    if (variant_.reads_kv_map() && next.kv.num_pages * next.kv.page_size != pool_rows_) return {};
    std::shared_ptr<const TensorcorePlan> plan = plan_to_take(next);
    if (!plan) return {};
    return [this, next, plan = std::move(plan)](void* stream) {
      upload(*plan, next, stream);
      plan_ = plan;
    };
  }
  void upload(const TensorcorePlan& plan, const Problem& phase, void* stream) {
    upload_metadata(
        plan.metadata_bytes, [&](unsigned char* staging) { stage_metadata(staging, plan, phase); }, stream);
  }

  // The run's split counts kept for a step when they pay, else the step's
  // own plan when it launches alike (TensorcoreSplitSearch::plan_to_refresh).
  std::shared_ptr<const TensorcorePlan> plan_to_take(const Problem& next) const {
    const TensorcoreSplitSearch search(next, variant_.rows, parallel_blocks(next, variant_));
    return search.plan_to_refresh(*plan_, [&](const TensorcorePlan& plan) { return launches_alike(next, plan); });
  }
  bool launches_alike(const Problem& next, const TensorcorePlan& plan) const {
    return plan.workspace_bytes <= capacity() && same_launch(launch_of(next, plan, workspace()), launch_);
  }

  void launch(const LayerTensors& layer, void* stream) const override {
    DeviceGuard guard(device());
    auto s = static_cast<cudaStream_t>(stream);
    helixmla_tc::Params params = launch_.params;
    params.q = layer.q;
    params.out = layer.out;
    params.stats = layer.stats;
    params.pool = layer.kv_pool;
    const double kv_scale = layer.kv_scale;  // dequantisation scale of every KV dtype
    params.scale_log2 = static_cast<float>(softmax_scale() * kv_scale * M_LOG2E);
    params.out_scale = static_cast<float>(kv_scale);
    SplitCombineArgs combine = launch_.combine;
    combine.out = layer.out;
    combine.stats = layer.stats;
    // Every kernel takes the map; the others are passed zeros.
    helixmla_tc::KvTensorMap kv_map{};
    static_assert(sizeof(kv_map) == sizeof(CUtensorMap) && alignof(helixmla_tc::KvTensorMap) == alignof(CUtensorMap));
    if (variant_.reads_kv_map()) encode_kv_tensor_map(&kv_map, layer.kv_pool, pool_rows_);
    void* args[] = {&params, &kv_map};
    if (kernel_.stub) {
      HELIXMLA_CUDA_CHECK(cudaLaunchKernel(kernel_.stub, dim3(launch_.blocks), dim3(kernel_.threads),
                                           args, static_cast<std::size_t>(kernel_.smem_bytes), s));
    } else {
      launch_jit_kernel(kernel_.function, launch_.blocks, kernel_.threads, kernel_.smem_bytes, s, args);
    }
    launch_split_combine(combine, s);
  }

  TensorcoreVariant variant_;
  Kernel kernel_;
  std::int64_t pool_rows_;  // the pool's rows of 576 elements: the tensor map's extent
  std::shared_ptr<const TensorcorePlan> plan_;  // the step's, whose split counts a refresh may keep
  TensorcoreLaunch launch_;
};

}  // namespace

TensorcoreVariant tensorcore_variant_of(const Problem& phase) {
  const std::int32_t q_len = phase.num_contexts > 0 ? 0 : phase.q_len.front();
  return tensorcore_variant(phase.num_heads, q_len, phase.kv.page_size, phase.q_dtype, phase.kv.dtype,
                            batch_bucket_of(phase.num_requests()));
}

std::size_t tensorcore_workspace_bytes(const Problem& phase, const TensorcoreVariant& variant) {
  return tensorcore_plan_for(phase, variant.rows, parallel_blocks(phase, variant))->workspace_bytes;
}

std::unique_ptr<PreparedRun> prepare_tensorcore(const Problem& phase, const TensorcoreVariant& variant,
                                                Workspace workspace, void* stream) {
  const MetadataUploadScope scope(stream, phase.location.device);
  require_tensor_alignment(layer_tensors(phase), kTensorcoreAlignment, false);
  std::shared_ptr<const TensorcorePlan> plan =
      tensorcore_plan_for(phase, variant.rows, parallel_blocks(phase, variant));
  const std::size_t needed = plan->workspace_bytes;
  if (workspace.data && workspace.bytes < needed) {
    throw InvalidArgument("workspace.bytes", -1, std::to_string(workspace.bytes),
                          "cuda_tensorcore needs at least " + std::to_string(needed) + " bytes for this phase");
  }
  require_alignment("workspace.data", workspace.data, 16, kTensorcoreAlignment.backend);
  auto run = std::make_unique<TensorcoreRun>(phase, variant, kernel_for(variant));
  run->take(phase, std::move(plan), workspace.data, workspace.data ? workspace.bytes : needed, stream);
  return run;
}

}  // namespace helixmla::cuda

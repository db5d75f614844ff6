#include "cuda/tensorcore_run.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/capture_check.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_guard.hpp"
#include "cuda/layer_bound_run.hpp"
#include "cuda/run_memory.hpp"
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
};

Kernel kernel_for(const TensorcoreVariant& variant) {
  Kernel k;
  k.smem_bytes = variant.smem_bytes();
  if (const void* stub = tensorcore_precompiled_kernel(variant)) {
    HELIXMLA_CUDA_CHECK(
        cudaFuncSetAttribute(stub, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_bytes));
    k.stub = stub;
    return k;
  }
  if (variant.precompiled()) {
    throw RuntimeFailure("tensor-core variant " + variant.name() +
                         " is listed as precompiled but missing from the library");
  }
  k.function = tensorcore_jit_function(variant, k.smem_bytes);
  return k;
}

// The kernel's 16-byte cp.async loads, 4-byte output stores and 8-byte stats
// stores need aligned tensors; a misaligned access would poison the context.
constexpr TensorAlignment kAlignment{"cuda_tensorcore", 16, 16, 4, 8};

// A prepared phase: its memory (run_memory.hpp) and launch arguments.
class TensorcoreRun final : public LayerBoundRun {
 public:
  TensorcoreRun(int device, const LayerTensors& prepared, double softmax_scale)
      : LayerBoundRun(prepared, kAlignment), device_(device), softmax_scale_(softmax_scale) {}

  RunMemory& memory() { return memory_; }

  // Launch arguments without the tensors.
  void set_launch(Kernel kernel, helixmla_tc::Params params, unsigned blocks, SplitCombineArgs combine) {
    kernel_ = kernel;
    params_ = params;
    blocks_ = blocks;
    combine_ = combine;
  }

 private:
  void launch(const LayerTensors& layer, void* stream) const override {
    DeviceGuard guard(device_);
    auto s = static_cast<cudaStream_t>(stream);
    helixmla_tc::Params params = params_;
    params.q = layer.q;
    params.out = layer.out;
    params.stats = layer.stats;
    params.pool = layer.kv_pool;
    const double kv_scale = layer.kv_scale;  // dequantisation scale of every KV dtype
    params.scale_log2 = static_cast<float>(softmax_scale_ * kv_scale * M_LOG2E);
    params.out_scale = static_cast<float>(kv_scale);
    SplitCombineArgs combine = combine_;
    combine.out = layer.out;
    combine.stats = layer.stats;
    void* args[] = {&params};
    if (kernel_.stub) {
      HELIXMLA_CUDA_CHECK(cudaLaunchKernel(kernel_.stub, dim3(blocks_), dim3(helixmla_tc::kThreads),
                                           args, static_cast<std::size_t>(kernel_.smem_bytes), s));
    } else {
      launch_jit_kernel(kernel_.function, blocks_, kernel_.smem_bytes, s, args);
    }
    launch_split_combine(combine, s);
  }

  int device_;
  double softmax_scale_;
  Kernel kernel_;
  helixmla_tc::Params params_{};
  unsigned blocks_ = 0;
  SplitCombineArgs combine_;
  RunMemory memory_;
};

std::int32_t parallel_blocks(const Problem& phase, const TensorcoreVariant& variant) {
  return tensorcore_block_slots(device_sm_count(phase.location.device), variant);
}

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
  DeviceGuard guard(phase.location.device);
  refuse_capturing_stream(static_cast<cudaStream_t>(stream));
  require_tensor_alignment(layer_tensors(phase), kAlignment, false);
  const std::shared_ptr<const TensorcorePlan> planned =
      tensorcore_plan_for(phase, variant.rows, parallel_blocks(phase, variant));
  const TensorcorePlan& plan = *planned;
  if (workspace.data && workspace.bytes < plan.workspace_bytes) {
    throw InvalidArgument("workspace.bytes", -1, std::to_string(workspace.bytes),
                          "cuda_tensorcore needs at least " +
                              std::to_string(plan.workspace_bytes) + " bytes for this phase");
  }
  require_alignment("workspace.data", workspace.data, 16, kAlignment.backend);
  const Kernel kernel = kernel_for(variant);
  auto run = std::make_unique<TensorcoreRun>(phase.location.device, layer_tensors(phase), phase.softmax_scale);
  auto* base = static_cast<unsigned char*>(run->memory().workspace(workspace.data, plan.workspace_bytes));

  helixmla_tc::Params params{};
  params.page_table = reinterpret_cast<const int*>(base + plan.page_table_offset);
  params.token_bounds = phase.helix.token_kv_bounds.empty()
                            ? nullptr
                            : reinterpret_cast<const int*>(base + plan.bounds_offset);
  params.items = reinterpret_cast<const helixmla_tc::WorkItem*>(base + plan.items_offset);
  params.partial_out = reinterpret_cast<float*>(base + plan.partial_out_offset);
  params.partial_stats = reinterpret_cast<float*>(base + plan.partial_stats_offset);
  params.page_table_stride = phase.page_table_stride;
  params.heads = phase.num_heads;

  SplitCombineArgs combine;
  combine.segments = reinterpret_cast<const SplitSegment*>(base + plan.segments_offset);
  combine.num_segments = static_cast<std::int32_t>(plan.segments.size());
  combine.total_rows = plan.split_rows;
  combine.wide_rows = plan.wide_split_rows;
  combine.partial_out = params.partial_out;
  combine.partial_stats = params.partial_stats;
  combine.kv_lora_rank = helixmla_tc::kLatent;
  combine.out_dtype = phase.out_dtype;

  run->set_launch(kernel, params, static_cast<unsigned>(plan.items.size()), combine);
  unsigned char* staging = run->memory().staging(plan.metadata_bytes);
  const auto put = [staging](std::size_t offset, const void* data, std::size_t bytes) {
    if (bytes > 0) std::memcpy(staging + offset, data, bytes);
  };
  put(plan.items_offset, plan.items.data(), plan.items.size() * sizeof(helixmla_tc::WorkItem));
  put(plan.segments_offset, plan.segments.data(), plan.segments.size() * sizeof(SplitSegment));
  put(plan.bounds_offset, phase.helix.token_kv_bounds.data(),
      phase.helix.token_kv_bounds.size() * sizeof(std::int32_t));
  put(plan.page_table_offset, phase.page_table.data(),
      phase.page_table.size() * sizeof(std::int32_t));
  run->memory().upload(base, plan.metadata_bytes, static_cast<cudaStream_t>(stream));
  return run;
}

}  // namespace helixmla::cuda

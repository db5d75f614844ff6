// The "cuda_tensorcore" backend: capability from the shape alone (no CUDA
// calls), execution through the kernel of tensorcore_kernel.cuh, precompiled
// or compiled just in time.
#include "cuda/tensorcore_backend.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "cuda/cuda_check.hpp"
#include "cuda/split_combine.hpp"
#include "cuda/tensorcore_jit.hpp"
#include "cuda/tensorcore_plan.hpp"
#include "cuda/tensorcore_precompiled.hpp"
#include "cuda/tensorcore_variants.hpp"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

constexpr std::int32_t kMaxGenerationQLen = 16;

bool is_16bit(DType d) { return d == DType::bf16 || d == DType::fp16; }

// Every condition the kernel's arithmetic and addressing rely on.
Verdict check_shape(const PhaseShape& s) {
  if (!s.on_device) return Verdict::no("tensors are in host memory; this backend needs CUDA device memory");
  if (s.dims.kv_lora_rank != helixmla_tc::kLatent ||
      s.dims.head_dim() != helixmla_tc::kHeadDim) {
    return Verdict::no("kernel is built for kv_lora_rank 512 + rope 64, got " +
                       std::to_string(s.dims.kv_lora_rank) + " + " + std::to_string(s.dims.rope_dim));
  }
  if (s.num_heads < 1 || s.num_heads > 128) {
    return Verdict::no("heads " + std::to_string(s.num_heads) + " outside 1..128");
  }
  if (!is_16bit(s.q_dtype)) return Verdict::no("Q dtype must be bf16 or fp16");
  if (s.out_dtype != s.q_dtype) return Verdict::no("output dtype must equal the Q dtype");
  if (s.kv_dtype != s.q_dtype && s.kv_dtype != DType::fp8_e4m3) {
    return Verdict::no(std::string("KV dtype ") + std::string(to_string(s.kv_dtype)) +
                       " with Q " + std::string(to_string(s.q_dtype)) +
                       ": the tensor cores take KV of the Q dtype or fp8");
  }
  if (s.page_size < 1) return Verdict::no("page size must be >= 1");
  if (s.phase == PhaseKind::generation && (s.q_len < 1 || s.q_len > kMaxGenerationQLen)) {
    return Verdict::no("generation q_len " + std::to_string(s.q_len) + " outside 1..16");
  }
  if (s.mask != MaskKind::linear) return Verdict::no("only the linear verify-group mask");
  if (s.beam_width != 1) return Verdict::no("beam width must be 1");
  if (s.has_stats && !s.stats_fp32_contiguous) {
    return Verdict::no("stats must be float32 [tokens, heads, 2]");
  }
  return Verdict::yes();
}

class TensorcoreCatalog final : public KernelCatalog {
 public:
  std::vector<KernelVariant> inventory(const Environment& env) const override {
    std::vector<KernelVariant> list;
    for (std::int32_t rows : kTensorcoreRowTiles) {
      for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
        for (std::int32_t page : kTensorcorePrecompiledPages) {
          list.push_back({TensorcoreVariant{rows, page, DType::bf16, kv}.name(), true});
        }
      }
    }
    if (!env.nvrtc) return list;
    const std::pair<DType, DType> pairs[] = {{DType::bf16, DType::bf16},
                                             {DType::bf16, DType::fp8_e4m3},
                                             {DType::fp16, DType::fp16},
                                             {DType::fp16, DType::fp8_e4m3}};
    for (std::int32_t rows : kTensorcoreRowTiles) {
      for (const auto& [q, kv] : pairs) {
        list.push_back({"tc_m" + std::to_string(rows) + "_p<any>_" + std::string(to_string(q)) +
                            "_" + std::string(to_string(kv)) + " (just in time)",
                        false});
      }
    }
    return list;
  }

  Verdict can_implement(const PhaseShape& shape, const Environment& env,
                        KernelVariant* chosen) const override {
    if (Verdict v = check_shape(shape); !v) return v;
    const TensorcoreVariant variant = tensorcore_variant_for(shape);
    if (variant.precompiled()) {
      if (chosen) *chosen = {variant.name(), true};
      return Verdict::yes(variant.name());
    }
    if (!env.nvrtc) {
      if (variant.q_dtype != DType::bf16) {
        return Verdict::no(std::string(to_string(variant.q_dtype)) +
                           " Q needs a just-in-time kernel and NVRTC is unavailable");
      }
      return Verdict::no("page size " + std::to_string(shape.page_size) +
                         " needs a just-in-time kernel and NVRTC is unavailable");
    }
    if (chosen) *chosen = {variant.name(), false};
    return Verdict::yes(variant.name() + " (just in time)");
  }
};

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

// Host memory the driver can copy from asynchronously; freed only after the
// copy that reads it (cudaFreeHost waits for the device).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) {
    if (bytes > 0) HELIXMLA_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_) cudaFreeHost(data_);
  }
  unsigned char* data() const { return static_cast<unsigned char*>(data_); }

 private:
  void* data_ = nullptr;
};

class TensorcoreRun final : public PreparedRun {
 public:
  explicit TensorcoreRun(std::size_t staging_bytes) : staging_(staging_bytes) {}
  TensorcoreRun(const TensorcoreRun&) = delete;
  TensorcoreRun& operator=(const TensorcoreRun&) = delete;
  ~TensorcoreRun() override {
    if (owned_workspace_) cudaFree(owned_workspace_);
  }

  unsigned char* staging() const { return staging_.data(); }
  // Scratch for callers that passed no workspace; lives as long as the run.
  void* own_workspace(std::size_t bytes) {
    HELIXMLA_CUDA_CHECK(cudaMalloc(&owned_workspace_, bytes > 0 ? bytes : 1));
    return owned_workspace_;
  }
  void set_launch(Kernel kernel, helixmla_tc::Params params, unsigned blocks,
                  SplitCombineArgs combine) {
    kernel_ = kernel;
    params_ = params;
    blocks_ = blocks;
    combine_ = combine;
  }

  void enqueue(void* stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    void* args[] = {&params_};
    if (kernel_.stub) {
      HELIXMLA_CUDA_CHECK(cudaLaunchKernel(kernel_.stub, dim3(blocks_), dim3(helixmla_tc::kThreads),
                                           args, static_cast<std::size_t>(kernel_.smem_bytes), s));
    } else {
      launch_jit_kernel(kernel_.function, blocks_, kernel_.smem_bytes, s, args);
    }
    launch_split_combine(combine_, s);
  }

 private:
  Kernel kernel_;
  helixmla_tc::Params params_{};
  unsigned blocks_ = 0;
  SplitCombineArgs combine_;
  PinnedBuffer staging_;
  void* owned_workspace_ = nullptr;
};

TensorcoreVariant variant_of(const Problem& phase) {
  TensorcoreVariant v;
  const std::int32_t q_len = phase.num_contexts > 0 ? 0 : phase.q_len.front();
  v.rows = tensorcore_row_tile(phase.num_heads, q_len);
  v.page_size = phase.kv.page_size;
  v.q_dtype = phase.q_dtype;
  v.kv_dtype = phase.kv.dtype;
  return v;
}

std::int32_t parallel_blocks(const Problem& phase, const TensorcoreVariant& variant) {
  int sms = 0;
  HELIXMLA_CUDA_CHECK(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, phase.location.device));
  return sms * variant.blocks_per_sm();
}

class TensorcoreBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda_tensorcore"; }
  int priority() const override { return 90; }

  Verdict available(const Environment& env) const override {
    if (!env.built("cuda_tensorcore")) return Verdict::no("not built into this library (no CUDA)");
    if (env.arch != Arch::sm90) {
      return Verdict::no(std::string("kernels are built for sm_90a; this GPU is ") +
                         std::string(to_string(env.arch)));
    }
    return Verdict::yes();
  }

  Verdict check(const PhaseShape& shape) const override { return check_shape(shape); }
  const KernelCatalog& catalog() const override { return catalog_; }

  std::size_t workspace_bytes(const Problem& phase) const override {
    const TensorcoreVariant variant = variant_of(phase);
    return plan_tensorcore(phase, variant.rows, parallel_blocks(phase, variant)).workspace_bytes;
  }

  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace workspace,
                                       void* stream) const override {
    const TensorcoreVariant variant = variant_of(phase);
    const TensorcorePlan plan =
        plan_tensorcore(phase, variant.rows, parallel_blocks(phase, variant));
    if (workspace.data && workspace.bytes < plan.workspace_bytes) {
      throw InvalidArgument("workspace.bytes", -1, std::to_string(workspace.bytes),
                            "cuda_tensorcore needs at least " +
                                std::to_string(plan.workspace_bytes) + " bytes for this phase");
    }
    if (reinterpret_cast<std::uintptr_t>(workspace.data) % 16 != 0) {
      throw InvalidArgument("workspace.data", -1, "misaligned", "must be 16-byte aligned");
    }
    const Kernel kernel = kernel_for(variant);
    auto run = std::make_unique<TensorcoreRun>(plan.metadata_bytes);
    auto* base = static_cast<unsigned char*>(
        workspace.data ? workspace.data : run->own_workspace(plan.workspace_bytes));

    helixmla_tc::Params params{};
    params.q = phase.q;
    params.out = phase.out;
    params.stats = phase.stats.present() ? phase.stats.data : nullptr;
    params.pool = phase.kv.pool;
    params.page_table = reinterpret_cast<const int*>(base + plan.page_table_offset);
    params.token_bounds = phase.helix.token_kv_bounds.empty()
                              ? nullptr
                              : reinterpret_cast<const int*>(base + plan.bounds_offset);
    params.items = reinterpret_cast<const helixmla_tc::WorkItem*>(base + plan.items_offset);
    params.partial_out = reinterpret_cast<float*>(base + plan.partial_out_offset);
    params.partial_stats = reinterpret_cast<float*>(base + plan.partial_stats_offset);
    params.page_table_stride = phase.page_table_stride;
    params.heads = phase.num_heads;
    const double kv_scale = phase.kv.dtype == DType::fp8_e4m3 ? phase.kv.scale : 1.0;
    params.scale_log2 = static_cast<float>(phase.softmax_scale * kv_scale * M_LOG2E);
    params.out_scale = static_cast<float>(kv_scale);

    SplitCombineArgs combine;
    combine.segments = reinterpret_cast<const SplitSegment*>(base + plan.segments_offset);
    combine.num_segments = static_cast<std::int32_t>(plan.segments.size());
    combine.total_rows = plan.split_rows;
    combine.partial_out = params.partial_out;
    combine.partial_stats = params.partial_stats;
    combine.kv_lora_rank = helixmla_tc::kLatent;
    combine.out = phase.out;
    combine.out_dtype = phase.out_dtype;
    combine.stats = params.stats;

    run->set_launch(kernel, params, static_cast<unsigned>(plan.items.size()), combine);
    unsigned char* staging = run->staging();
    const auto put = [staging](std::size_t offset, const void* data, std::size_t bytes) {
      if (bytes > 0) std::memcpy(staging + offset, data, bytes);
    };
    put(plan.items_offset, plan.items.data(), plan.items.size() * sizeof(helixmla_tc::WorkItem));
    put(plan.segments_offset, plan.segments.data(), plan.segments.size() * sizeof(SplitSegment));
    put(plan.bounds_offset, phase.helix.token_kv_bounds.data(),
        phase.helix.token_kv_bounds.size() * sizeof(std::int32_t));
    put(plan.page_table_offset, phase.page_table.data(),
        phase.page_table.size() * sizeof(std::int32_t));
    HELIXMLA_CUDA_CHECK(cudaMemcpyAsync(base, staging, plan.metadata_bytes, cudaMemcpyHostToDevice,
                                        static_cast<cudaStream_t>(stream)));
    return run;
  }

 private:
  TensorcoreCatalog catalog_;
};

}  // namespace

BackendPtr make_tensorcore_backend() { return std::make_shared<TensorcoreBackend>(); }

}  // namespace helixmla::cuda

// The "cuda_tensorcore" backend: capability from the shape alone (no CUDA
// calls), execution through the kernel of tensorcore_kernel.cuh, precompiled
// or compiled just in time.
#include "cuda/tensorcore_backend.hpp"

#include <limits>
#include <string>
#include <utility>

#include "cuda/tensorcore_kernel.cuh"
#include "cuda/tensorcore_run.hpp"
#include "cuda/tensorcore_variants.hpp"

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
  // Rows of one request (q_len x heads) are counted in int32 by the plan and the kernel.
  if (static_cast<std::int64_t>(s.max_q_len) * s.num_heads > std::numeric_limits<std::int32_t>::max()) {
    return Verdict::no("q_len x heads of one request exceeds int32 (" + std::to_string(s.max_q_len) + " x " +
                       std::to_string(s.num_heads) + ")");
  }
  if (s.beam_width != 1) return Verdict::no("beam width must be 1");
  if (s.has_stats && !s.stats_fp32_contiguous) {
    return Verdict::no("stats must be float32 [tokens, heads, 2]");
  }
  if (Verdict aligned = check_alignment(s.alignment, kTensorcoreAlignment); !aligned) return aligned;
  return Verdict::yes();
}

class TensorcoreCatalog final : public KernelCatalog {
 public:
  std::vector<KernelVariant> inventory(const Environment& env) const override {
    // Every build of every row tile for Q and KV types `q` and `kv`, at page 0
    // (the caller sets it).
    const auto builds = [](DType q, DType kv) {
      std::vector<TensorcoreVariant> all;
      for (std::int32_t rows : kTensorcoreRowTiles) {
        // The tile's plain build on its default engine, then its others:
        // another engine, or mma.sync's two-block build.
        const auto add = [&](TensorcoreEngine engine, bool two_blocks) {
          all.push_back({.rows = rows, .page_size = 0, .q_dtype = q, .kv_dtype = kv, .engine = engine,
                         .two_blocks = two_blocks});
        };
        const TensorcoreEngine plain = tensorcore_default_engine(rows);
        add(plain, false);
        if (tensorcore_has_seesaw_build(rows, kv)) add(TensorcoreEngine::seesaw, false);
        if (tensorcore_has_two_block_build(rows, kv)) add(plain, true);
        if (tensorcore_has_fp8_steps_build(rows, kv)) add(TensorcoreEngine::fp8_steps, false);
      }
      // The 48-row tile exists on the fp8-steps engine alone.
      if (tensorcore_has_fp8_steps_build(kTensorcoreFp8StepsWideRows, kv)) {
        all.push_back({.rows = kTensorcoreFp8StepsWideRows, .page_size = 0, .q_dtype = q, .kv_dtype = kv,
                       .engine = TensorcoreEngine::fp8_steps});
      }
      return all;
    };
    std::vector<KernelVariant> list;
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      for (TensorcoreVariant v : builds(DType::bf16, kv)) {
        for (std::int32_t page : kTensorcorePrecompiledPages) {
          v.page_size = page;
          list.push_back({v.name(), true});
        }
      }
    }
    if (!env.nvrtc) return list;
    const std::pair<DType, DType> pairs[] = {{DType::bf16, DType::bf16},
                                             {DType::bf16, DType::fp8_e4m3},
                                             {DType::fp16, DType::fp16},
                                             {DType::fp16, DType::fp8_e4m3}};
    for (const auto& [q, kv] : pairs) {
      for (const TensorcoreVariant& v : builds(q, kv)) {
        list.push_back({v.name_for_page("<any>") + " (JIT)", false});
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
    return Verdict::yes(variant.name());  // the selector adds "(JIT)"
  }
};

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
    return tensorcore_workspace_bytes(phase, tensorcore_variant_of(phase));
  }

  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace workspace,
                                       void* stream) const override {
    return prepare_tensorcore(phase, tensorcore_variant_of(phase), workspace, stream);
  }

 private:
  TensorcoreCatalog catalog_;
};

}  // namespace

BackendPtr make_tensorcore_backend() { return std::make_shared<TensorcoreBackend>(); }

}  // namespace helixmla::cuda

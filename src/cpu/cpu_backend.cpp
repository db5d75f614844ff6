#include "cpu/cpu_backend.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/reference.hpp"
#include "helixmla/validate.hpp"

namespace helixmla::cpu {

namespace {

constexpr const char* kOnDevice = "tensors are in CUDA device memory; the cpu backend reads host memory";

class ReferenceCatalog final : public KernelCatalog {
 public:
  std::vector<KernelVariant> inventory(const Environment&) const override { return {variant()}; }

  Verdict can_implement(const PhaseShape& shape, const Environment&,
                        KernelVariant* chosen) const override {
    if (shape.on_device) return Verdict::no(kOnDevice);
    if (chosen) *chosen = variant();
    return Verdict::yes("reference_f64");
  }

 private:
  static KernelVariant variant() { return {"reference_f64", true}; }
};

// The CPU backend is synchronous: enqueue computes the whole phase on the host
// before returning and ignores the stream, so it is not graph-capturable and
// it is meant for machines without a GPU, tests and checking other backends.
class ReferenceRun final : public PreparedRun {
 public:
  explicit ReferenceRun(const Problem& phase) { hold(phase); }
  void enqueue(void*) override { reference_attention(phase_); }
  void enqueue(const LayerTensors& layer, void*) override {
    check_layer(layer);
    reference_attention(with_layer(phase_, layer));
  }
  void check_layer(const LayerTensors& layer) const override { validate_layer(layer, phase_.stats.present()); }
  // Nothing is launched ahead, so any host phase of the next step fits.
  Refresh plan_refresh(const Problem& next) override {
    if (next.location.kind != Location::Kind::host) return {};
    return [this, next](void*) { hold(next); };
  }

 private:
  // The metadata is copied, as the CUDA backends upload it at prepare: the
  // caller may change or free it once prepare returns. Tensors stay the
  // caller's.
  void hold(const Problem& phase) {
    q_len_.assign(phase.q_len.begin(), phase.q_len.end());
    kv_len_.assign(phase.kv_len.begin(), phase.kv_len.end());
    page_table_.assign(phase.page_table.begin(), phase.page_table.end());
    bounds_.assign(phase.helix.token_kv_bounds.begin(), phase.helix.token_kv_bounds.end());
    phase_ = phase;
    phase_.q_len = q_len_;
    phase_.kv_len = kv_len_;
    phase_.page_table = page_table_;
    phase_.helix.token_kv_bounds = bounds_;
  }

  Problem phase_;
  std::vector<std::int32_t> q_len_, kv_len_, page_table_, bounds_;
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  int priority() const override { return 10; }
  Verdict available(const Environment&) const override {
    return Verdict::yes("always built; runs on the host");
  }

  // Everything the validator admits runs here, except what the batch model
  // cannot express for the reference: device tensors and non-linear masks.
  Verdict check(const PhaseShape& shape) const override {
    if (shape.on_device) return Verdict::no(kOnDevice);
    if (shape.mask != MaskKind::linear) {
      return Verdict::no("the reference implements the linear verify-group mask only");
    }
    if (shape.has_stats && !shape.stats_fp32_contiguous) {
      return Verdict::no("the reference writes float32 [tokens, heads, 2] statistics only");
    }
    return Verdict::yes();
  }

  const KernelCatalog& catalog() const override { return catalog_; }

  std::size_t workspace_bytes(const Problem&) const override { return 0; }

  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace, void*) const override {
    if (phase.location.kind != Location::Kind::host) {
      throw InvalidArgument("location", -1, "cuda:" + std::to_string(phase.location.device), kOnDevice);
    }
    return std::make_unique<ReferenceRun>(phase);
  }

 private:
  ReferenceCatalog catalog_;
};

}  // namespace

BackendPtr make_cpu_backend() { return std::make_shared<const CpuBackend>(); }

}  // namespace helixmla::cpu

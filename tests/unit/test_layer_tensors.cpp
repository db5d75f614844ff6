// One run prepared per decode step, enqueued on every layer's tensors
// (PreparedRun::enqueue with LayerTensors): each layer's outputs against the
// naive float64 attention of that layer, the prepared layer left untouched,
// and bad layers refused by name before anything runs, also when a mixed
// batch's phases run on different backends and only the second refuses.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/reference.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/runtime.hpp"
#include "support/any_shape_catalog.hpp"
#include "support/host_checks.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

using testing::expect_matches_naive;
using testing::host_only_runtime;
using testing::outputs_untouched;
using testing::small_mixed_spec;

TEST(LayerTensors, OneRunComputesEveryLayerOfAMixedBatch) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    const std::string label(to_string(kv));
    testing::SyntheticBatch first(small_mixed_spec(kv, 1));
    testing::SyntheticBatch second = testing::another_layer(first, 1);
    const Runtime runtime = host_only_runtime();
    auto run = runtime.prepare(first.problem(), {}, nullptr);

    first.poison_outputs();
    second.poison_outputs();
    run->enqueue(layer_tensors(second.problem()), nullptr);
    expect_matches_naive(second, label + ", second layer");
    EXPECT_TRUE(outputs_untouched(first)) << label << ": the prepared layer's outputs were written";

    first.poison_outputs();
    run->enqueue(nullptr);
    expect_matches_naive(first, label + ", prepared layer");
  }
}

TEST(LayerTensors, PhaseLayerOffsetsMatchThePlannedParts) {
  testing::SyntheticBatch batch(small_mixed_spec(DType::bf16, 3));
  const Problem whole = batch.problem();
  const PhasePlan plan = plan_phases(whole);
  for (const Phase* phase : {&*plan.context, &*plan.generation}) {
    const LayerTensors part = phase_layer(whole, layer_tensors(whole), phase->first_token);
    EXPECT_EQ(part.q, phase->problem.q);
    EXPECT_EQ(part.out, phase->problem.out);
    EXPECT_EQ(part.stats, phase->problem.stats.data);
    EXPECT_EQ(part.kv_pool, phase->problem.kv.pool);
  }
  EXPECT_NE(plan.generation->problem.q, whole.q);  // the generations start past the contexts' tokens
}

// Each bad layer names its field; the outputs stay poisoned (nothing ran).
TEST(LayerTensors, BadLayersAreRefusedByName) {
  testing::SyntheticBatch first(small_mixed_spec(DType::bf16, 5));
  testing::SyntheticBatch second = testing::another_layer(first, 1);
  const Runtime runtime = host_only_runtime();
  auto with_stats = runtime.prepare(first.problem(), {}, nullptr);
  testing::BatchSpec plain = first.spec();
  plain.stats = false;
  testing::SyntheticBatch no_stats_batch(plain);
  auto without_stats = runtime.prepare(no_stats_batch.problem(), {}, nullptr);

  struct Case {
    const char* field;
    PreparedRun* run;
    void (*spoil)(LayerTensors&);
  };
  const Case cases[] = {
      {"layer.q", with_stats.get(), [](LayerTensors& l) { l.q = nullptr; }},
      {"layer.out", with_stats.get(), [](LayerTensors& l) { l.out = nullptr; }},
      {"layer.kv_pool", with_stats.get(), [](LayerTensors& l) { l.kv_pool = nullptr; }},
      {"layer.stats", with_stats.get(), [](LayerTensors& l) { l.stats = nullptr; }},
      {"layer.stats", without_stats.get(), [](LayerTensors&) {}},
      {"layer.kv_scale", with_stats.get(), [](LayerTensors& l) { l.kv_scale = 0.0f; }},
      {"layer.kv_scale", with_stats.get(),
       [](LayerTensors& l) { l.kv_scale = std::numeric_limits<float>::quiet_NaN(); }},
  };
  for (const Case& c : cases) {
    second.poison_outputs();
    LayerTensors layer = layer_tensors(second.problem());
    c.spoil(layer);
    try {
      c.run->enqueue(layer, nullptr);
      ADD_FAILURE() << c.field << ": accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), c.field) << e.what();
    }
    EXPECT_TRUE(outputs_untouched(second)) << c.field << ": ran before refusing";
  }
}

// The generation phase on the host reference, with an alignment rule of its
// own for q, as the CUDA backends have: the contexts stay on the cpu backend.
class GenerationsOnlyAligned final : public Backend {
 public:
  static constexpr std::uintptr_t kQAlignment = 64;

  std::string_view name() const override { return "aligned_generations"; }
  int priority() const override { return 1000; }
  Verdict available(const Environment&) const override { return Verdict::yes(); }
  Verdict check(const PhaseShape& shape) const override {
    return shape.phase == PhaseKind::generation ? Verdict::yes() : Verdict::no("generations only");
  }
  const KernelCatalog& catalog() const override { return catalog_; }
  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace, void*) const override {
    class Run final : public PreparedRun {
     public:
      explicit Run(const Problem& p) : phase_(p) {}
      void enqueue(void*) override { reference_attention(phase_); }
      void enqueue(const LayerTensors& layer, void*) override {
        check_layer(layer);
        reference_attention(with_layer(phase_, layer));
      }
      void check_layer(const LayerTensors& layer) const override {
        if (reinterpret_cast<std::uintptr_t>(layer.q) % kQAlignment != 0) {
          throw InvalidArgument("layer.q", -1, "misaligned", "aligned_generations needs 64-byte alignment");
        }
      }

     private:
      Problem phase_;
    };
    return std::make_unique<Run>(phase);
  }

 private:
  testing::AnyShapeCatalog catalog_;
};

// A layer whose q the second phase's backend refuses: the first phase (the
// contexts, on the cpu backend) must not have run either.
TEST(LayerTensors, AMixedBatchOnTwoBackendsRefusesBeforeEitherPhaseRuns) {
  testing::SyntheticBatch first(small_mixed_spec(DType::bf16, 7));
  testing::SyntheticBatch second = testing::another_layer(first, 1);
  RuntimeOptions options;
  options.environment = Environment{};
  options.backends = builtin_backends();
  options.backends.push_back(std::make_shared<GenerationsOnlyAligned>());
  const Runtime runtime(options);
  const Selection chosen = runtime.select(first.problem());
  ASSERT_TRUE(chosen.context && chosen.generation);
  ASSERT_EQ(chosen.context->choice, "cpu");
  ASSERT_EQ(chosen.generation->choice, "aligned_generations");
  auto run = runtime.prepare(first.problem(), {}, nullptr);

  // The second layer's q copied to 64-byte-aligned storage, and once more
  // one element past such a line: every phase's part of that copy is
  // misaligned (the parts start whole rows of 1152 bytes apart).
  const Problem layer_problem = second.problem();
  const std::size_t q_bytes = static_cast<std::size_t>(layer_problem.num_tokens()) * layer_problem.num_heads *
                              layer_problem.dims.head_dim() * dtype_size(layer_problem.q_dtype);
  constexpr std::size_t kLine = GenerationsOnlyAligned::kQAlignment;
  std::vector<std::byte> aligned_storage(q_bytes + kLine), shifted_storage(q_bytes + 2 * kLine);
  const auto copy_q = [&](std::vector<std::byte>& storage, std::size_t past_line) {
    const auto base = reinterpret_cast<std::uintptr_t>(storage.data());
    std::byte* q = storage.data() + (kLine - base % kLine) % kLine + past_line;
    std::memcpy(q, layer_problem.q, q_bytes);
    LayerTensors layer = layer_tensors(layer_problem);
    layer.q = q;
    return layer;
  };
  const LayerTensors aligned = copy_q(aligned_storage, 0);
  const LayerTensors shifted = copy_q(shifted_storage, 2);

  second.poison_outputs();
  try {
    run->enqueue(shifted, nullptr);
    ADD_FAILURE() << "a misaligned layer.q was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "layer.q") << e.what();
  }
  EXPECT_TRUE(outputs_untouched(second)) << "the context phase ran before the generation phase refused";

  second.poison_outputs();
  run->enqueue(aligned, nullptr);
  expect_matches_naive(second, "the same layer, aligned");
}

}  // namespace
}  // namespace helixmla

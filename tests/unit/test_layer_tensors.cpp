// One run prepared per decode step, enqueued on every layer's tensors
// (PreparedRun::enqueue with LayerTensors): each layer's outputs against the
// naive float64 attention of that layer, the prepared layer left untouched,
// and bad layers refused by name before anything runs.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/runtime.hpp"
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

}  // namespace
}  // namespace helixmla

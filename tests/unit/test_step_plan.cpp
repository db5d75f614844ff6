// Runtime::plan_step: validation, selection and the workspace size done once
// for both workspace_bytes and prepare. A host backend that wants workspace
// records the slices it is given, so the carving of the caller's workspace
// into phases is checked, as are a too-small workspace and bad input.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/reference.hpp"
#include "helixmla/runtime.hpp"
#include "support/any_shape_catalog.hpp"
#include "support/host_checks.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

constexpr std::size_t kBytesPerRequest = 1000;

// The reference on the host, asking kBytesPerRequest of workspace per request
// of a phase and recording each phase's slice.
class WorkspaceRecorder final : public Backend {
 public:
  std::string_view name() const override { return "recorder"; }
  int priority() const override { return 1000; }
  Verdict available(const Environment&) const override { return Verdict::yes(); }
  Verdict check(const PhaseShape&) const override { return Verdict::yes(); }
  const KernelCatalog& catalog() const override { return catalog_; }
  std::size_t workspace_bytes(const Problem& phase) const override {
    ++sized;
    return kBytesPerRequest * static_cast<std::size_t>(phase.num_requests());
  }
  std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace workspace, void*) const override {
    given.push_back(workspace);
    class Run final : public PreparedRun {
     public:
      explicit Run(const Problem& p) : phase_(p) {}
      void enqueue(void*) override { reference_attention(phase_); }
      void enqueue(const LayerTensors& layer, void*) override { reference_attention(with_layer(phase_, layer)); }

     private:
      Problem phase_;
    };
    return std::make_unique<Run>(phase);
  }

  mutable std::vector<Workspace> given;
  mutable int sized = 0;  // workspace_bytes calls

 private:
  testing::AnyShapeCatalog catalog_;
};

using testing::expect_matches_naive;
using testing::host_only_runtime;
using testing::small_mixed_spec;

struct Fixture {
  std::shared_ptr<WorkspaceRecorder> backend = std::make_shared<WorkspaceRecorder>();
  Runtime runtime{[this] {
    RuntimeOptions options;
    options.environment = Environment{};
    options.backends = {backend};
    return options;
  }()};
};

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

TEST(StepPlan, OnePlanAnswersTheSizeAndCarvesTheWorkspaceByPhase) {
  Fixture f;
  testing::SyntheticBatch batch(small_mixed_spec());
  const StepPlan step = f.runtime.plan_step(batch.problem());
  const std::size_t context = aligned(2 * kBytesPerRequest);
  const std::size_t generation = aligned(3 * kBytesPerRequest);
  EXPECT_EQ(step.workspace_bytes(), context + generation);
  EXPECT_EQ(f.runtime.workspace_bytes(batch.problem()), step.workspace_bytes());
  EXPECT_EQ(step.selection().generation->choice, "recorder");

  std::vector<std::byte> workspace(step.workspace_bytes());
  batch.poison_outputs();
  auto run = step.prepare({workspace.data(), workspace.size()}, nullptr);
  ASSERT_EQ(f.backend->given.size(), 2u);
  EXPECT_EQ(f.backend->given[0].data, workspace.data());
  EXPECT_EQ(f.backend->given[0].bytes, context);
  EXPECT_EQ(f.backend->given[1].data, workspace.data() + context);
  EXPECT_EQ(f.backend->given[1].bytes, generation);

  run->enqueue(nullptr);
  expect_matches_naive(batch, "prepared from the step plan");
}

// An engine asks the size, then prepares: each phase is sized (planned, for
// the CUDA backends) once between the two.
TEST(StepPlan, EachPhaseIsSizedOncePerStep) {
  Fixture f;
  testing::SyntheticBatch batch(small_mixed_spec());
  const StepPlan step = f.runtime.plan_step(batch.problem());
  EXPECT_EQ(f.backend->sized, 0);
  std::vector<std::byte> workspace(step.workspace_bytes());
  EXPECT_EQ(step.workspace_bytes(), workspace.size());
  step.prepare({workspace.data(), workspace.size()}, nullptr);
  EXPECT_EQ(f.backend->sized, 2);
}

TEST(StepPlan, ATooSmallWorkspaceIsRefusedBeforeAnyPhaseIsPrepared) {
  Fixture f;
  testing::SyntheticBatch batch(small_mixed_spec());
  const StepPlan step = f.runtime.plan_step(batch.problem());
  std::vector<std::byte> workspace(step.workspace_bytes() - 1);
  try {
    step.prepare({workspace.data(), workspace.size()}, nullptr);
    ADD_FAILURE() << "a workspace one byte short was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "workspace.bytes");
    EXPECT_EQ(e.value(), std::to_string(workspace.size()));
  }
  EXPECT_TRUE(f.backend->given.empty());
}

TEST(StepPlan, BadInputIsRefusedByThePlan) {
  Fixture f;
  testing::SyntheticBatch batch(small_mixed_spec());
  Problem p = batch.problem();
  p.num_heads = 0;
  try {
    f.runtime.plan_step(p);
    ADD_FAILURE() << "num_heads 0 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "num_heads");
  }
}

// The next decode step of small_mixed_spec's batch: the same contexts, every
// generation one token longer, other values and another page table.
testing::BatchSpec next_step(testing::BatchSpec spec) {
  for (std::int32_t& kv : spec.kv_len) ++kv;
  spec.seed += 1;
  return spec;
}

TEST(StepPlan, ARefreshedRunComputesTheNextStep) {
  const Runtime runtime = host_only_runtime();
  testing::SyntheticBatch step(small_mixed_spec());
  testing::SyntheticBatch next(next_step(small_mixed_spec()));
  auto run = runtime.prepare(step.problem(), {}, nullptr);
  ASSERT_TRUE(runtime.plan_step(next.problem()).refresh(*run, nullptr));
  next.poison_outputs();
  run->enqueue(nullptr);
  expect_matches_naive(next, "refreshed");
}

// A step with other phases (here: no contexts, so the generations start at
// another token) cannot take the run, which keeps computing its own step.
TEST(StepPlan, AStepWithOtherPhasesIsNotTakenAndChangesNothing) {
  const Runtime runtime = host_only_runtime();
  testing::SyntheticBatch step(small_mixed_spec());
  testing::BatchSpec other_spec = next_step(small_mixed_spec());
  other_spec.contexts = 0;
  testing::SyntheticBatch other(other_spec);
  auto run = runtime.prepare(step.problem(), {}, nullptr);
  EXPECT_FALSE(runtime.plan_step(other.problem()).refresh(*run, nullptr));
  step.poison_outputs();
  run->enqueue(nullptr);
  expect_matches_naive(step, "not refreshed");
}

// The composite's own conditions: the same heads and the same statistics
// (a captured enqueue baked in the tensor offsets and whether stats are
// written).
TEST(StepPlan, AStepWithOtherHeadsOrStatisticsIsNotTaken) {
  const Runtime runtime = host_only_runtime();
  testing::SyntheticBatch step(small_mixed_spec());
  auto run = runtime.prepare(step.problem(), {}, nullptr);
  testing::BatchSpec more_heads = next_step(small_mixed_spec());
  more_heads.heads = 8;
  testing::SyntheticBatch heads(more_heads);
  EXPECT_FALSE(runtime.plan_step(heads.problem()).refresh(*run, nullptr));
  testing::BatchSpec no_stats = next_step(small_mixed_spec());
  no_stats.stats = false;
  testing::SyntheticBatch plain(no_stats);
  EXPECT_FALSE(runtime.plan_step(plain.problem()).refresh(*run, nullptr));
  step.poison_outputs();
  run->enqueue(nullptr);
  expect_matches_naive(step, "after two refused steps");
}

// Runs that cannot refresh (a backend's default) and runs no Runtime made
// are refused, not thrown at.
TEST(StepPlan, RunsThatCannotRefreshAreRefused) {
  Fixture f;
  testing::SyntheticBatch step(small_mixed_spec());
  testing::SyntheticBatch next(next_step(small_mixed_spec()));
  auto run = f.runtime.prepare(step.problem(), {}, nullptr);
  EXPECT_FALSE(f.runtime.plan_step(next.problem()).refresh(*run, nullptr));
  auto bare = f.backend->prepare(step.problem(), {}, nullptr);
  EXPECT_FALSE(f.runtime.plan_step(next.problem()).refresh(*bare, nullptr));
}

// The chosen backends as `run` and the Helix driver print them alike: one
// name for a batch of one phase, both phases named for a mixed one.
TEST(DescribeChoices, NamesOnePhaseByItsBackendAndAMixedBatchByPhase) {
  Selection selection;
  EXPECT_EQ(describe_choices(selection), "");
  selection.generation = Decision{};
  selection.generation->choice = "cuda_tensorcore";
  EXPECT_EQ(describe_choices(selection), "cuda_tensorcore");
  selection.context = Decision{};
  selection.context->choice = "cpu";
  EXPECT_EQ(describe_choices(selection), "context: cpu, generation: cuda_tensorcore");
  selection.generation.reset();
  EXPECT_EQ(describe_choices(selection), "cpu");
}

}  // namespace
}  // namespace helixmla

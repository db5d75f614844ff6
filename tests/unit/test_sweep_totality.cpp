// Totality: every shape of the supported space has a backend among
// helixmla's own, on every architecture and on none; and the sweep finds a
// hole when there is one.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/sweep.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/profile.hpp"
#include "helixmla/runtime.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

#if defined(HELIXMLA_WITH_CUDA)
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

TEST(SweepTotality, BuiltinBackendsRunEveryShapeOnEveryArchitecture) {
  SweepSpace space;  // the whole supported space, every architecture and none
  space.device_tensors = kCudaBuilt;
  const SweepResult result = sweep(builtin_backends(), space);

  ASSERT_EQ(result.archs.size(), std::size(kAllArchs));
  // KV/Q: bf16/bf16, fp16/fp16, fp8/bf16, fp8/fp16; plain, then a mixed batch's two phases.
  const std::int64_t per_arch = 128 * 16 * 12 * 4 * 2 * 3;
  for (const SweepArch& arch : result.archs) {
    EXPECT_EQ(arch.points, per_arch) << to_string(arch.arch);
    EXPECT_EQ(arch.unroutable_points, 0) << to_string(arch.arch);
    std::int64_t won = 0;
    for (const auto& [backend, count] : arch.wins) won += count;
    EXPECT_EQ(won, per_arch) << to_string(arch.arch);
  }
  std::string first;
  if (!result.unroutable.empty()) {
    first = describe(result.unroutable.front().shape);
    for (const Candidate& c : result.unroutable.front().candidates) first += "\n  " + c.backend + ": " + c.reason;
  }
  EXPECT_TRUE(result.unroutable.empty()) << result.unroutable.size() << " unroutable shapes, first: " << first;
  EXPECT_TRUE(result.fails_at_run.empty());
  // Without a GPU the reference serves everything.
  EXPECT_EQ(result.archs.front().wins.at("cpu"), per_arch);
}

class RefusesSomeHeads final : public Backend, public KernelCatalog {
 public:
  std::string_view name() const override { return "picky"; }
  int priority() const override { return 1; }
  Verdict available(const Environment&) const override { return Verdict::yes(); }
  Verdict check(const PhaseShape& s) const override {
    return s.num_heads == 77 && s.page_size == 48 ? Verdict::no("no 77-head kernel for 48-token pages") : Verdict::yes();
  }
  const KernelCatalog& catalog() const override { return *this; }
  std::vector<KernelVariant> inventory(const Environment&) const override { return {{"k", true}}; }
  Verdict can_implement(const PhaseShape&, const Environment&, KernelVariant* chosen) const override {
    if (chosen) *chosen = {"k", true};
    return Verdict::yes();
  }
};

TEST(SweepTotality, FindsAndExplainsEveryHole) {
  SweepSpace space;
  space.archs = {Arch::sm90};
  space.kv_dtypes = {DType::bf16};
  space.q_lens = {1, 2};
  std::int64_t visits = 0;
  SweepHooks hooks;
  hooks.visit = [&](const SweepPoint& p) {
    ++visits;
    EXPECT_EQ(p.decision == nullptr, p.shape.num_heads == 77 && p.shape.page_size == 48);
  };
  std::vector<double> progress;
  hooks.progress = [&](Arch, double done) { progress.push_back(done); };
  const SweepResult result = sweep({std::make_shared<RefusesSomeHeads>()}, space, hooks);

  EXPECT_EQ(visits, result.points());
  ASSERT_FALSE(progress.empty());
  EXPECT_DOUBLE_EQ(progress.back(), 1.0);
  // Distinct shapes: q_len 1 and 2, Helix off and on, plus the context phase of each Helix setting.
  ASSERT_EQ(result.unroutable.size(), 6u);
  for (const SweepIssue& issue : result.unroutable) {
    EXPECT_EQ(issue.shape.num_heads, 77);
    ASSERT_EQ(issue.candidates.size(), 1u);
    EXPECT_EQ(issue.candidates[0].reason, "check: no 77-head kernel for 48-token pages");
  }
  // Each generation shape appears in a plain and a mixed batch; each context
  // shape in a mixed batch per q_len.
  EXPECT_EQ(result.archs[0].unroutable_points, 2 * 2 * 2 + 2 * 2);

  const std::string svg = sweep_svg(result, result.archs[0]);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("picky"), std::string::npos);
  EXPECT_NE(svg.find("#111111"), std::string::npos) << "the hole must be painted";
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// The sweep builds shapes directly; they must be what shape_of derives for the
// batch the cell describes, or the sweep would prove nothing about real calls.
TEST(SweepTotality, CellShapesMatchShapeOfRealBatches) {
  SweepSpace space;
  space.archs = {Arch::sm90};
  space.heads = {48};
  space.q_lens = {3};
  space.page_sizes = {64};
  space.kv_dtypes = {DType::fp8_e4m3};
  space.helix = {true};
  space.device_tensors = true;
  std::vector<std::pair<bool, PhaseShape>> seen;
  SweepHooks hooks;
  hooks.visit = [&](const SweepPoint& p) { seen.emplace_back(p.mixed, p.shape); };
  sweep(builtin_backends(), space, hooks);
  ASSERT_EQ(seen.size(), 6u);  // bf16 and fp16 Q, each a plain batch and a mixed batch's two phases
  EXPECT_EQ(seen[0].second.q_dtype, DType::bf16);
  EXPECT_EQ(seen[3].second.q_dtype, DType::fp16);

  for (const auto& [mixed, shape] : seen) {
    testing::BatchSpec spec;
    spec.heads = 48;
    spec.generations = space.generations;
    spec.q_len = 3;
    spec.kv_len = {300};
    spec.contexts = mixed ? space.contexts : 0;
    spec.context_len = space.context_len;
    spec.page_size = 64;
    spec.kv_dtype = DType::fp8_e4m3;
    spec.q_dtype = shape.q_dtype;
    spec.allocate_tensors = false;
    testing::SyntheticBatch batch(spec);
    Problem whole = batch.problem();
    whole.location = Location::cuda(0);
    whole.helix.cp_size = space.cp_size;
    std::vector<float> stats(1);
    whole.stats = {stats.data(), DType::fp32, batch.num_tokens(), 48, 2};
    const PhasePlan plan = plan_phases(whole);
    const Phase& phase = shape.phase == PhaseKind::context ? *plan.context : *plan.generation;
    EXPECT_EQ(shape, shape_of(phase, whole)) << describe(shape) << "\nvs\n" << describe(shape_of(phase, whole));
  }
}

TEST(SweepTotality, ReplaysTheTrtllmHoleOnlyBeforeTheFix) {
  SweepSpace space;
  space.archs = {Arch::sm103};
  space.kv_dtypes = {DType::bf16};
  space.q_lens = {1};
  space.helix = {true};
  space.device_tensors = true;
  const auto kimi = [](const SweepIssue& issue) {
    return issue.shape.num_heads == 48 && issue.shape.page_size == 64 && issue.shape.helix;
  };

  const Profile before = load_profile("trtllm-before");
  space.phases = before.phases;
  const SweepResult old_routing = sweep(before.backends, space);
  EXPECT_TRUE(std::any_of(old_routing.fails_at_run.begin(), old_routing.fails_at_run.end(), kimi));
  std::set<std::int32_t> failing_heads;
  for (const SweepIssue& issue : old_routing.fails_at_run) {
    if (issue.shape.page_size == 64) failing_heads.insert(issue.shape.num_heads);
  }
  EXPECT_EQ(failing_heads.size(), 31u);  // 33..63 heads: the 64-row tile exists for 32-token pages only
  EXPECT_EQ(*failing_heads.begin(), 33);

  const SweepResult fixed = sweep(load_profile("trtllm").backends, space);
  EXPECT_TRUE(fixed.fails_at_run.empty());
  EXPECT_TRUE(fixed.unroutable.empty()) << describe(fixed.unroutable.front().shape);
}

}  // namespace
}  // namespace helixmla

// Selection with fake backends declared here: capability decides, kernels
// have the final word, performance only chooses among capable backends, and
// decisions are cached by the full shape.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/candidates.hpp"
#include "core/env_integer.hpp"
#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/selector.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

using Rule = std::function<Verdict(const PhaseShape&)>;

Verdict always(const PhaseShape&) { return Verdict::yes(); }

class FakeCatalog final : public KernelCatalog {
 public:
  std::function<Verdict(const PhaseShape&, const Environment&)> rule;
  std::string kernel;
  std::vector<KernelVariant> inventory(const Environment&) const override { return {{kernel, true}}; }
  Verdict can_implement(const PhaseShape& shape, const Environment& env, KernelVariant* chosen) const override {
    Verdict v = rule(shape, env);
    if (v && chosen) *chosen = {kernel, true};
    return v;
  }
};

class FakeBackend final : public Backend {
 public:
  FakeBackend(std::string name, int priority, Rule check = always) : name_(std::move(name)), priority_(priority) {
    check_ = std::move(check);
    catalog_.kernel = name_ + "_kernel";
    catalog_.rule = [](const PhaseShape&, const Environment&) { return Verdict::yes(); };
  }
  std::string_view name() const override { return name_; }
  int priority() const override { return priority_; }
  bool executable() const override { return executable_; }
  Verdict available(const Environment& env) const override { return available_(env); }
  Verdict check(const PhaseShape& shape) const override {
    ++checks;
    return check_(shape);
  }
  const KernelCatalog& catalog() const override { return catalog_; }

  std::function<Verdict(const Environment&)> available_ = [](const Environment&) { return Verdict::yes(); };
  Rule check_;
  FakeCatalog catalog_;
  bool executable_ = true;
  mutable std::atomic<int> checks{0};

 private:
  std::string name_;
  int priority_;
};

std::shared_ptr<FakeBackend> fake(std::string name, int priority, Rule check = always) {
  return std::make_shared<FakeBackend>(std::move(name), priority, std::move(check));
}

PhaseShape decode_shape(std::int32_t heads = 16, std::int32_t page = 64) {
  PhaseShape s;
  s.num_heads = heads;
  s.page_size = page;
  return s;
}

Environment env_for(Arch arch) {
  Environment env;
  env.arch = arch;
  env.nvrtc = true;
  return env;
}

const Candidate& candidate(const Decision& d, const std::string& name) {
  for (const Candidate& c : d.candidates) {
    if (c.backend == name) return c;
  }
  throw std::runtime_error("no candidate " + name);
}

std::string no_capable_message(const Selector& selector, const PhaseShape& shape, const std::string& forced = {}) {
  try {
    selector.select_uncached(shape, forced);
  } catch (const NoCapableBackend& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected NoCapableBackend for " << describe(shape);
  return {};
}

TEST(Selector, HighestPriorityCapableBackendWins) {
  auto small = fake("small_heads", 90, [](const PhaseShape& s) {
    return s.num_heads <= 64 ? Verdict::yes() : Verdict::no("at most 64 heads");
  });
  auto any = fake("any", 50);
  const Selector selector({any, small}, env_for(Arch::sm90));
  EXPECT_EQ(selector.backends().front()->name(), "small_heads");

  const Decision d16 = selector.select_uncached(decode_shape(16));
  EXPECT_EQ(d16.choice, "small_heads");
  EXPECT_EQ(d16.rule, "priority");
  EXPECT_EQ(d16.backend.get(), small.get());

  const Decision d128 = selector.select_uncached(decode_shape(128));
  EXPECT_EQ(d128.choice, "any");
  EXPECT_FALSE(candidate(d128, "small_heads").capable);
  EXPECT_NE(candidate(d128, "small_heads").reason.find("at most 64 heads"), std::string::npos);
}

TEST(Selector, KernelRejectionMovesTheChoiceAndRecordsTheReason) {
  auto fast = fake("fast", 90);
  fast->catalog_.rule = [](const PhaseShape& s, const Environment&) {
    return s.page_size == 64 ? Verdict::yes() : Verdict::no("no kernel for page size " + std::to_string(s.page_size));
  };
  auto slow = fake("slow", 10);
  const Selector selector({fast, slow}, env_for(Arch::sm90));

  const Decision on64 = selector.select_uncached(decode_shape(16, 64));
  EXPECT_EQ(on64.choice, "fast");
  EXPECT_EQ(candidate(on64, "fast").kernel, "fast_kernel");

  const Decision on48 = selector.select_uncached(decode_shape(16, 48));
  EXPECT_EQ(on48.choice, "slow");
  const Candidate& rejected = candidate(on48, "fast");
  EXPECT_TRUE(rejected.available);
  EXPECT_FALSE(rejected.capable);
  EXPECT_EQ(rejected.reason, "no kernel: no kernel for page size 48");
  EXPECT_NE(on48.trace().find("no kernel for page size 48"), std::string::npos);
}

TEST(Selector, EmptyCapableSetListsEveryBackendWithItsReason) {
  auto a = fake("alpha", 30, [](const PhaseShape&) { return Verdict::no("alpha refuses"); });
  auto b = fake("beta", 20);
  b->available_ = [](const Environment&) { return Verdict::no("beta needs a GPU"); };
  auto c = fake("gamma", 10);
  c->catalog_.rule = [](const PhaseShape&, const Environment&) { return Verdict::no("gamma has no kernel"); };
  const Selector selector({a, b, c}, env_for(Arch::none));

  const std::string message = no_capable_message(selector, decode_shape());
  EXPECT_NE(message.find("\n  alpha: check: alpha refuses"), std::string::npos) << message;
  EXPECT_NE(message.find("\n  beta: not available: beta needs a GPU"), std::string::npos) << message;
  EXPECT_NE(message.find("\n  gamma: no kernel: gamma has no kernel"), std::string::npos) << message;
  EXPECT_THROW(selector.select(decode_shape()), NoCapableBackend);

  const auto candidates = assess_all(selector.backends(), decode_shape(), selector.environment());
  ASSERT_EQ(candidates.size(), 3u);
  EXPECT_FALSE(candidates[1].available);
}

TEST(Selector, ForcedBackendIsUsedOrRefusedNeverReplaced) {
  auto picky = fake("picky", 90, [](const PhaseShape& s) {
    return s.kv_dtype == DType::fp8_e4m3 ? Verdict::no("fp8 KV is not supported") : Verdict::yes();
  });
  auto plain = fake("plain", 10);
  const Selector selector({picky, plain}, env_for(Arch::sm90));

  const Decision forced = selector.select_uncached(decode_shape(), "plain");
  EXPECT_EQ(forced.choice, "plain");
  EXPECT_EQ(forced.rule, "forced");

  PhaseShape fp8 = decode_shape();
  fp8.kv_dtype = DType::fp8_e4m3;
  const std::string refused = no_capable_message(selector, fp8, "picky");
  EXPECT_NE(refused.find("picky was forced but cannot run"), std::string::npos) << refused;
  EXPECT_NE(refused.find("fp8 KV is not supported"), std::string::npos) << refused;

  const std::string unknown = no_capable_message(selector, decode_shape(), "turbo");
  EXPECT_NE(unknown.find("turbo"), std::string::npos);
  EXPECT_NE(unknown.find("known backends: picky, plain"), std::string::npos) << unknown;
}

TEST(Selector, PerformanceTableChoosesOnlyAmongCapableBackends) {
  auto a = fake("a", 90);
  auto b = fake("b", 50);
  auto c = fake("c", 10, [](const PhaseShape& s) {
    return s.num_heads == 16 ? Verdict::no("c cannot run 16 heads") : Verdict::yes();
  });
  const PhaseShape shape = decode_shape(16);
  PerfTable table;
  const PerfKey key = PerfKey::of(shape, Arch::sm90);
  table.record(key, "a", 30.0);
  table.record(key, "b", 20.0);
  table.record(key, "c", 1.0);  // fastest by far, but cannot run the shape
  const Selector selector({a, b, c}, env_for(Arch::sm90), table);

  const Decision d = selector.select_uncached(shape);
  EXPECT_EQ(d.choice, "b");
  EXPECT_EQ(d.rule, "measured: " + key.describe());
  EXPECT_EQ(candidate(d, "c").measured_us, 1.0);
  EXPECT_FALSE(candidate(d, "c").capable);

  // No entry for this shape: static priority.
  EXPECT_EQ(selector.select_uncached(decode_shape(32)).rule, "priority");
  EXPECT_EQ(selector.select_uncached(decode_shape(32)).choice, "a");

  // An entry where only a non-capable backend was measured: static priority.
  PerfTable only_c;
  only_c.record(key, "c", 1.0);
  const Selector by_priority({a, b, c}, env_for(Arch::sm90), only_c);
  EXPECT_EQ(by_priority.select_uncached(shape).choice, "a");
  EXPECT_EQ(by_priority.select_uncached(shape).rule, "priority");

  // The same table on another architecture has no entry.
  const Selector other_arch({a, b, c}, env_for(Arch::sm80), table);
  EXPECT_EQ(other_arch.select_uncached(shape).choice, "a");
}

// A table from another build (or from before a kernel existed) may time some
// capable backends and not others; an untimed one is not known to be slower,
// so such an entry leaves the choice to priority and says which it lacks.
TEST(Selector, PerformanceTableDecidesOnlyWhenItTimesEveryCapableBackend) {
  std::mt19937 rng(20261203);
  std::uniform_real_distribution<double> us(1.0, 1000.0);
  auto a = fake("a", 90);
  auto b = fake("b", 50);
  auto c = fake("c", 10, [](const PhaseShape&) { return Verdict::no("c cannot run it"); });
  const PhaseShape shape = decode_shape(16);
  const PerfKey key = PerfKey::of(shape, Arch::sm90);

  PerfTable only_b;
  const double b_us = us(rng);
  only_b.record(key, "b", b_us);
  only_b.record(key, "c", b_us / 2);
  const Decision partial = Selector({a, b, c}, env_for(Arch::sm90), only_b).select_uncached(shape);
  EXPECT_EQ(partial.choice, "a");
  EXPECT_EQ(partial.rule, "priority: " + key.describe() + " has no time for capable a");
  EXPECT_EQ(candidate(partial, "b").measured_us, b_us);
  EXPECT_FALSE(candidate(partial, "a").measured_us);

  // Equal times: the higher priority wins, and the rule says so.
  PerfTable tie;
  const double t = us(rng);
  tie.record(key, "a", t);
  tie.record(key, "b", t);
  const Decision tied = Selector({b, a, c}, env_for(Arch::sm90), tie).select_uncached(shape);
  EXPECT_EQ(tied.choice, "a");
  EXPECT_EQ(tied.rule, "measured: " + key.describe() + " (equal times: priority breaks the tie)");

  PerfTable both;
  both.record(key, "a", t + 1.0);
  both.record(key, "b", t);
  const Decision measured = Selector({a, b, c}, env_for(Arch::sm90), both).select_uncached(shape);
  EXPECT_EQ(measured.choice, "b");
  EXPECT_EQ(measured.rule, "measured: " + key.describe());
}

TEST(Selector, CacheReturnsTheSameDecisionAndSeparatesShapes) {
  auto a = fake("a", 90, [](const PhaseShape& s) {
    return s.helix ? Verdict::no("no Helix") : Verdict::yes();
  });
  auto b = fake("b", 10);
  const Selector selector({a, b}, env_for(Arch::sm90));

  const PhaseShape shape = decode_shape();
  const Decision& first = selector.select(shape);
  const int checks_after_first = a->checks.load();
  const Decision& again = selector.select(shape);
  EXPECT_EQ(&first, &again);
  EXPECT_EQ(a->checks.load(), checks_after_first) << "a cached select must not re-run the checks";

  PhaseShape helix = shape;
  helix.helix = true;
  helix.cp_size = 2;
  helix.has_stats = true;
  const Decision& with_helix = selector.select(helix);
  EXPECT_NE(&with_helix, &first);
  EXPECT_EQ(first.choice, "a");
  EXPECT_EQ(with_helix.choice, "b");

  const Decision& forced = selector.select(shape, "b");
  EXPECT_NE(&forced, &first);
  EXPECT_EQ(forced.choice, "b");
  EXPECT_EQ(selector.select(shape).choice, "a");

  PhaseShape other_batch = shape;
  other_batch.batch_bucket = 8;
  EXPECT_NE(&selector.select(other_batch), &first);
  EXPECT_NE(hash_value(other_batch), hash_value(shape));

  // Copies of a selector share answers; concurrent callers agree.
  std::vector<const Decision*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] {
      PhaseShape s = decode_shape(static_cast<std::int32_t>(1 + t % 2));
      for (int i = 0; i < 200; ++i) seen[t] = &selector.select(s);
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t t = 2; t < seen.size(); ++t) EXPECT_EQ(seen[t], seen[t % 2]);
}

TEST(Selector, ProfileOnlyBackendsMayBeChosen) {
  auto described = fake("described", 90);
  described->executable_ = false;
  const Selector selector({described, fake("real", 10)}, env_for(Arch::sm100));
  EXPECT_EQ(selector.select_uncached(decode_shape()).choice, "described");
  EXPECT_THROW(described->prepare(Problem{}, Workspace{}, nullptr), NoCapableBackend);
  EXPECT_EQ(described->workspace_bytes(Problem{}), 0u);
}

TEST(Selector, DuplicateBackendNamesAreRejected) {
  EXPECT_THROW(Selector({fake("x", 1), fake("x", 2)}, env_for(Arch::none)), InvalidArgument);
}

// ---- routing of real batches: planner + shape_of + selector ---------------

testing::BatchSpec small_spec() {
  testing::BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 8;
  spec.generations = 3;
  spec.q_len = 1;
  spec.kv_len = {40, 50, 70};
  spec.page_size = 16;
  spec.allocate_tensors = false;
  return spec;
}

PhaseShape generation_shape(const Problem& whole) {
  const PhasePlan plan = plan_phases(whole);
  EXPECT_TRUE(plan.generation.has_value());
  return shape_of(*plan.generation, whole);
}

// A "helix" backend that serves only Helix decode and verify groups with
// stats; a "plain" one that refuses Helix; a "decode" one for q_len 1 only.
std::vector<BackendPtr> routing_backends() {
  auto helix = fake("helix", 90, [](const PhaseShape& s) {
    if (!s.helix) return Verdict::no("Helix batches only");
    if (!s.has_stats || !s.stats_fp32_contiguous) return Verdict::no("needs float32 [tokens, H, 2] stats");
    return Verdict::yes();
  });
  auto decode = fake("decode", 70, [](const PhaseShape& s) {
    if (s.helix) return Verdict::no("no Helix");
    if (s.phase != PhaseKind::generation || s.q_len != 1) return Verdict::no("single-token decode only");
    return Verdict::yes();
  });
  auto prefill = fake("prefill", 60, [](const PhaseShape& s) {
    if (s.phase != PhaseKind::context) return Verdict::no("context phase only");
    return Verdict::yes();
  });
  auto verify = fake("verify", 50, [](const PhaseShape& s) {
    if (s.phase != PhaseKind::generation || s.q_len < 2) return Verdict::no("verify groups only");
    if (s.helix) return Verdict::no("no Helix");
    return Verdict::yes();
  });
  return {helix, decode, prefill, verify};
}

TEST(Routing, HelixAndOrdinaryAttentionGoToDifferentBackends) {
  const Selector selector(routing_backends(), env_for(Arch::none));
  testing::SyntheticBatch ordinary(small_spec());
  EXPECT_EQ(selector.select(generation_shape(ordinary.problem())).choice, "decode");

  testing::BatchSpec with_stats = small_spec();
  with_stats.stats = true;
  with_stats.allocate_tensors = true;
  testing::SyntheticBatch helix_batch(with_stats);
  Problem helix = helix_batch.problem();
  helix.helix.cp_size = 2;
  const PhaseShape shape = generation_shape(helix);
  EXPECT_TRUE(shape.helix);
  EXPECT_EQ(shape.cp_size, 2);
  EXPECT_TRUE(shape.has_stats);
  EXPECT_TRUE(shape.stats_fp32_contiguous);
  EXPECT_EQ(selector.select(shape).choice, "helix");

  // Stats with a layout the backend cannot write: Helix has nowhere to go.
  helix.stats.width = 3;
  const PhaseShape bad_stats = generation_shape(helix);
  EXPECT_FALSE(bad_stats.stats_fp32_contiguous);
  EXPECT_NE(no_capable_message(selector, bad_stats).find("needs float32 [tokens, H, 2] stats"), std::string::npos);
}

TEST(Routing, VerifyGroupsAndSingleTokenDecode) {
  const Selector selector(routing_backends(), env_for(Arch::none));
  for (std::int32_t q_len : {1, 2, 3, 4, 8}) {
    testing::BatchSpec spec = small_spec();
    spec.q_len = q_len;
    testing::SyntheticBatch batch(spec);
    const PhaseShape shape = generation_shape(batch.problem());
    EXPECT_EQ(shape.q_len, q_len);
    EXPECT_EQ(shape.max_q_len, q_len == 3 ? 4 : q_len);
    EXPECT_EQ(selector.select(shape).choice, q_len == 1 ? "decode" : "verify") << "q_len " << q_len;
  }
}

TEST(Routing, MixedBatchPhasesAreGenerationRelative) {
  testing::BatchSpec spec = small_spec();
  spec.contexts = 2;
  spec.context_len = 24;
  spec.generations = 5;
  spec.q_len = 2;
  spec.kv_len = {40, 50, 70};
  testing::SyntheticBatch batch(spec);
  // Distinct sentinel rows: every page-table row starts with its request index.
  const std::int32_t stride = batch.page_table_stride_;
  for (std::int32_t r = 0; r < spec.contexts + spec.generations; ++r) {
    batch.page_table_[static_cast<std::size_t>(r * stride)] = 1000 + r;
  }
  const Problem whole = batch.problem();
  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.context && plan.generation);
  const Problem& gen = plan.generation->problem;
  EXPECT_EQ(plan.generation->first_request, 2);
  EXPECT_EQ(plan.generation->first_token, 2 * 24);
  ASSERT_EQ(gen.num_requests(), 5);
  for (std::int32_t r = 0; r < gen.num_requests(); ++r) {
    EXPECT_EQ(gen.page_table[static_cast<std::size_t>(r * stride)], 1000 + 2 + r);
    EXPECT_EQ(gen.kv_len[r], spec.kv_len[static_cast<std::size_t>(r) % spec.kv_len.size()]);
  }

  const PhaseShape gen_shape = shape_of(*plan.generation, whole);
  EXPECT_EQ(gen_shape.phase, PhaseKind::generation);
  EXPECT_EQ(gen_shape.q_len, 2);
  EXPECT_EQ(gen_shape.batch_bucket, 4);  // 5 generations, floor power of two
  EXPECT_TRUE(gen_shape.batch_has_generations);
  const PhaseShape ctx_shape = shape_of(*plan.context, whole);
  EXPECT_EQ(ctx_shape.phase, PhaseKind::context);
  EXPECT_EQ(ctx_shape.q_len, 0);
  EXPECT_EQ(ctx_shape.max_q_len, 32);
  EXPECT_EQ(ctx_shape.batch_bucket, 2);

  const Selector selector(routing_backends(), env_for(Arch::none));
  EXPECT_EQ(selector.select(ctx_shape).choice, "prefill");
  EXPECT_EQ(selector.select(gen_shape).choice, "verify");

  // The generation part of a mixed batch has the shape of the same
  // generations alone: its routing cannot depend on the contexts before it.
  testing::BatchSpec alone = spec;
  alone.contexts = 0;
  testing::SyntheticBatch alone_batch(alone);
  EXPECT_EQ(generation_shape(alone_batch.problem()), gen_shape);
}

TEST(Routing, ContextOnlyBatchKnowsItHasNoGenerations) {
  testing::BatchSpec spec = small_spec();
  spec.contexts = 2;
  spec.generations = 0;
  testing::SyntheticBatch batch(spec);
  const Problem whole = batch.problem();
  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.context);
  EXPECT_FALSE(plan.generation);
  EXPECT_FALSE(shape_of(*plan.context, whole).batch_has_generations);
}

TEST(Routing, PageSizesFollowTheKernelInventory) {
  // Precompiled for 16/32/64-token pages, any other page size just in time
  // when NVRTC is present; a portable backend takes what remains.
  auto tensor = fake("tensor", 90);
  tensor->catalog_.rule = [](const PhaseShape& s, const Environment& env) {
    if (s.page_size == 16 || s.page_size == 32 || s.page_size == 64) return Verdict::yes();
    return env.nvrtc ? Verdict::yes("JIT") : Verdict::no("page size needs NVRTC");
  };
  auto portable = fake("portable", 10);
  Environment no_jit = env_for(Arch::sm90);
  no_jit.nvrtc = false;
  const Selector with_jit({tensor, portable}, env_for(Arch::sm90));
  const Selector without_jit({tensor, portable}, no_jit);
  for (std::int32_t page : {1, 3, 16, 32, 48, 64, 96, 128, 256}) {
    testing::BatchSpec spec = small_spec();
    spec.page_size = page;
    testing::SyntheticBatch batch(spec);
    const PhaseShape shape = generation_shape(batch.problem());
    EXPECT_EQ(shape.page_size, page);
    EXPECT_EQ(with_jit.select(shape).choice, "tensor");
    const bool precompiled = page == 16 || page == 32 || page == 64;
    EXPECT_EQ(without_jit.select(shape).choice, precompiled ? "tensor" : "portable") << "page " << page;
  }
}

TEST(Routing, HeadCountsDtypesAndArchitectures) {
  auto hopper = fake("hopper", 90, [](const PhaseShape& s) {
    if (s.num_heads % 16 != 0) return Verdict::no("heads must be a multiple of 16");
    if (s.kv_dtype == DType::fp16) return Verdict::no("no fp16 KV");
    return Verdict::yes();
  });
  hopper->available_ = [](const Environment& env) {
    return env.arch == Arch::sm90 ? Verdict::yes() : Verdict::no("built for sm90a only");
  };
  auto generic = fake("generic", 50);
  generic->available_ = [](const Environment& env) {
    return env.has_gpu() ? Verdict::yes() : Verdict::no("needs a GPU");
  };
  auto host = fake("host", 10);

  struct Case {
    Arch arch;
    std::int32_t heads;
    DType kv;
    const char* expected;
  };
  const Case cases[] = {
      {Arch::sm90, 16, DType::bf16, "hopper"},    {Arch::sm90, 128, DType::fp8_e4m3, "hopper"},
      {Arch::sm90, 48, DType::bf16, "hopper"},    {Arch::sm90, 40, DType::bf16, "generic"},
      {Arch::sm90, 16, DType::fp16, "generic"},   {Arch::sm80, 16, DType::bf16, "generic"},
      {Arch::sm120, 1, DType::fp8_e4m3, "generic"}, {Arch::none, 16, DType::bf16, "host"},
  };
  for (const Case& c : cases) {
    const Selector selector({hopper, generic, host}, env_for(c.arch));
    testing::BatchSpec spec = small_spec();
    spec.heads = c.heads;
    spec.kv_dtype = c.kv;
    spec.q_dtype = testing::default_q_dtype(c.kv);
    testing::SyntheticBatch batch(spec);
    const PhaseShape shape = generation_shape(batch.problem());
    EXPECT_EQ(shape.num_heads, c.heads);
    EXPECT_EQ(shape.kv_dtype, c.kv);
    const Decision& d = selector.select(shape);
    EXPECT_EQ(d.choice, c.expected) << to_string(c.arch) << " H=" << c.heads << " kv=" << to_string(c.kv);
    if (c.arch != Arch::sm90) {
      EXPECT_EQ(candidate(d, "hopper").reason, "not available: built for sm90a only");
    }
  }
}

TEST(ShapeOf, BatchBucketIsTheFloorPowerOfTwo) {
  EXPECT_EQ(batch_bucket_of(0), 1);
  EXPECT_EQ(batch_bucket_of(1), 1);
  EXPECT_EQ(batch_bucket_of(2), 2);
  EXPECT_EQ(batch_bucket_of(3), 2);
  EXPECT_EQ(batch_bucket_of(63), 32);
  EXPECT_EQ(batch_bucket_of(64), 64);
  EXPECT_EQ(batch_bucket_of(100000), 65536);
}

TEST(ShapeOf, MaxQLenBucketIsTheCeilingPowerOfTwoWithinInt32) {
  constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(max_q_len_bucket_of(0), 1);
  EXPECT_EQ(max_q_len_bucket_of(1), 1);
  EXPECT_EQ(max_q_len_bucket_of(3), 4);
  EXPECT_EQ(max_q_len_bucket_of(512), 512);
  EXPECT_EQ(max_q_len_bucket_of(std::int64_t{1} << 30), 1 << 30);
  EXPECT_EQ(max_q_len_bucket_of((std::int64_t{1} << 30) + 1), kInt32Max);
  EXPECT_EQ(max_q_len_bucket_of(kInt32Max), kInt32Max);
}

TEST(ShapeOf, DeviceLocationAndDescription) {
  testing::SyntheticBatch batch(small_spec());
  Problem whole = batch.problem();
  EXPECT_FALSE(generation_shape(whole).on_device);
  whole.location = Location::cuda(0);
  const PhaseShape shape = generation_shape(whole);
  EXPECT_TRUE(shape.on_device);
  const std::string text = describe(shape);
  EXPECT_NE(text.find("generation H=8 q_len=1 page=16 kv=bf16"), std::string::npos) << text;
  EXPECT_NE(text.find("device"), std::string::npos) << text;
}

TEST(Trace, ListsEveryBackendAndTheChoice) {
  auto a = fake("alpha", 30, [](const PhaseShape&) { return Verdict::no("alpha refuses"); });
  auto b = fake("beta", 20);
  const Selector selector({a, b}, env_for(Arch::sm90));
  const std::string trace = selector.select(decode_shape()).trace();
  EXPECT_NE(trace.find("alpha"), std::string::npos);
  EXPECT_NE(trace.find("alpha refuses"), std::string::npos);
  EXPECT_NE(trace.find("beta_kernel"), std::string::npos);
  EXPECT_NE(trace.find("choice: beta (rule: priority)"), std::string::npos) << trace;
}

TEST(PerfTable, RoundTripsThroughJson) {
  PerfTable table;
  PerfKey key{Arch::sm90, DType::fp8_e4m3, 128, 1, 64, 32};
  table.record(key, "cuda_tensorcore", 12.5);
  table.record(key, "cuda_generic", 30.0);
  const PerfTable back = PerfTable::from_json(table.to_json());
  ASSERT_EQ(back.size(), 1u);
  const PerfTable::Times* times = back.find(key);
  ASSERT_NE(times, nullptr);
  EXPECT_EQ(times->at("cuda_tensorcore"), 12.5);
  EXPECT_EQ(times->at("cuda_generic"), 30.0);
}

TEST(PerfTable, ErrorsNameTheField) {
  const auto field_of = [](const std::string& text) {
    try {
      PerfTable::from_json(text);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("no error");
  };
  EXPECT_EQ(field_of("{\"version\": 2, \"entries\": []}"), "perf_table.version");
  EXPECT_EQ(field_of("{\"version\": 1}"), "perf_table.entries");
  const std::string entry =
      R"({"arch":"sm90","kv_dtype":"bf16","heads":16,"q_len":1,"page_size":64,"batch_bucket":1,"times_us":{"a":1.0}})";
  EXPECT_EQ(field_of("{\"version\":1,\"entries\":[" + entry + "]}"), "no error");
  auto broken = [&](const std::string& from, const std::string& to) {
    std::string e = entry;
    e.replace(e.find(from), from.size(), to);
    return field_of("{\"version\":1,\"entries\":[" + entry + "," + e + "]}");
  };
  EXPECT_EQ(broken("\"sm90\"", "\"sm91\""), "perf_table.entries[1].arch");
  EXPECT_EQ(broken("\"bf16\"", "\"int4\""), "perf_table.entries[1].kv_dtype");
  EXPECT_EQ(broken("\"heads\":16", "\"heads\":\"16\""), "perf_table.entries[1].heads");
  EXPECT_EQ(broken("\"q_len\":1,", ""), "perf_table.entries[1].q_len");
  EXPECT_EQ(broken("\"a\":1.0", "\"a\":-1"), "perf_table.entries[1].times_us.a");
  EXPECT_EQ(broken("\"heads\":16", "\"heads\":0"), "perf_table.entries[1].heads");
  EXPECT_EQ(broken("\"page_size\":64", "\"page_size\":0"), "perf_table.entries[1].page_size");
  EXPECT_EQ(broken("\"heads\":16", "\"heads\":999"), "perf_table.entries[1].heads") << "no shape has 999 heads";
  EXPECT_EQ(broken("\"batch_bucket\":1", "\"batch_bucket\":3"), "perf_table.entries[1].batch_bucket");
  EXPECT_EQ(broken("\"q_len\":1,", "\"q_len\":1,\"qlen\":2,"), "perf_table.entries[1].qlen") << "a misspelt field";
  EXPECT_EQ(field_of("{\"version\":1,\"entries\":[],\"note\":\"x\"}"), "perf_table.note");
  EXPECT_EQ(broken("\"a\":1.0", "\"a\":2.0"), "perf_table.entries[1].times_us.a") << "a repeated shape";
  EXPECT_EQ(broken("\"a\":1.0", "\"b\":2.0"), "no error") << "another backend of the same shape";
  EXPECT_EQ(broken("\"sm90\"", "\"9.0\""), "perf_table.entries[1].arch") << "not an architecture's name";
}

// A NaN recorded first won every comparison after it (and saved as null,
// which the loader refuses); an empty name matches no backend.
TEST(PerfTable, RecordRefusesTimesTheSelectorCannotCompare) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> us(1.0, 1000.0);
  const PerfKey key{Arch::sm90, DType::bf16, 16, 1, 64, 1};
  const auto error_of = [&](const std::string& backend, double microseconds) {
    PerfTable table;
    try {
      table.record(key, backend, microseconds);
    } catch (const InvalidArgument& e) {
      return e.field() + " = " + e.value();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("a", std::numeric_limits<double>::quiet_NaN()), "microseconds = nan");
  EXPECT_EQ(error_of("a", std::numeric_limits<double>::infinity()), "microseconds = inf");
  EXPECT_EQ(error_of("a", 0.0), "microseconds = 0");
  const double negative = -us(rng);
  EXPECT_EQ(error_of("a", negative), fmt::format("microseconds = {}", negative));
  EXPECT_EQ(error_of("", us(rng)), "backend = \"\"");
  EXPECT_EQ(error_of("a", us(rng)), "no error");

  const std::string entry = R"({"arch":"sm90","kv_dtype":"bf16","heads":16,"q_len":1,"page_size":64,)"
                            R"("batch_bucket":1,"times_us":{"":1.5}})";
  try {
    PerfTable::from_json("{\"version\":1,\"entries\":[" + entry + "]}");
    ADD_FAILURE() << "an empty backend name was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "perf_table.entries[0].times_us");
  }
}

// JSON leaves a repeated key to the reader; nlohmann would keep the last one
// without a word, so 999 heads could hide behind 16.
TEST(PerfTable, RepeatedKeysAreErrors) {
  const auto field_of = [](const std::string& text) {
    try {
      PerfTable::from_json(text, "t.json");
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("no error");
  };
  const std::string entry =
      R"({"arch":"sm90","kv_dtype":"bf16","heads":999,"heads":16,"q_len":1,"page_size":64,"batch_bucket":1,)"
      R"("times_us":{"a":1.0}})";
  try {
    PerfTable::from_json("{\"version\":1,\"entries\":[" + entry + "]}", "t.json");
    ADD_FAILURE() << "a repeated key was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "invalid perf_table.entries[0].heads = t.json: appears more than once in its object (JSON "
                 "readers differ on which one counts)");
  }
  EXPECT_EQ(field_of("{\"version\":1,\"entries\":[[],{},[{}]," + entry + "]}"), "perf_table.entries[3].heads");
  EXPECT_EQ(field_of(R"({"version":1,"entries":[],"version":1})"), "perf_table.version");
  EXPECT_EQ(field_of(R"({"version":1,"entries":[{"times_us":{"a":1.0,"a":2.0}}]})"),
            "perf_table.entries[0].times_us.a");
  // The same key in sibling or nested objects is no repeat: the error is the
  // first entry's missing field.
  EXPECT_EQ(field_of(R"({"version":1,"entries":[{"arch":"sm90"},{"arch":[{"arch":1}]}]})"),
            "perf_table.entries[0].kv_dtype");
}

// Opening a FIFO waits for a writer, for ever if none comes: it is refused
// by its kind, unopened.
TEST(PerfTable, AFifoIsRefusedWithoutOpeningIt) {
  const std::filesystem::path fifo =
      std::filesystem::temp_directory_path() / ("helixmla-test-fifo-" + std::to_string(::getpid()));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  auto loading = std::async(std::launch::async, [&] { return PerfTable::load(fifo.string(), "HELIXMLA_PERF_TABLE"); });
  if (loading.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ::close(::open(fifo.c_str(), O_WRONLY));  // frees the loader, blocked in opening it
    ADD_FAILURE() << "the loader opened the FIFO";
  }
  try {
    loading.get();
    ADD_FAILURE() << "a FIFO was read as a performance table";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "HELIXMLA_PERF_TABLE");
    EXPECT_EQ(e.value(), fifo.string());
    EXPECT_EQ(e.rule(), "is a FIFO (named pipe), not a performance table file");
  }
  std::filesystem::remove(fifo);
}

TEST(ParseArch, ReadsCanonicalAndNvidiaSpellingsOnly) {
  for (const Arch arch : kAllArchs) EXPECT_EQ(parse_arch(to_string(arch)), arch) << to_string(arch);
  for (const char* sm90 : {"90", "sm_90", "sm90a", "sm_90a", "90a"}) EXPECT_EQ(parse_arch(sm90), Arch::sm90) << sm90;
  EXPECT_EQ(parse_arch("sm_100f"), Arch::sm100);
  EXPECT_EQ(parse_arch("cpu"), Arch::none);
  for (const char* junk : {"xyz90abc", "9.0", "sm_1_0_0", "qq90", "SM90", " sm90", "sm90 ", "sm90aa", "sm_", "sm",
                           "a", "", "95", "sm9"}) {
    EXPECT_EQ(parse_arch(junk), std::nullopt) << junk;
  }
}

// Environment variables are read as the integer flags are, and a value too
// large is said to be too large, whatever its size.
TEST(EnvInteger, ReadsPlainDecimalsAndNamesTheRange) {
  const auto error_of = [](const char* text, long long most = kEnvIntegerLimit) {
    try {
      return std::to_string(parse_env_integer("V", text, 0, most));
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "V");
      EXPECT_EQ(e.value(), text);
      return e.rule();
    }
  };
  EXPECT_EQ(error_of("0"), "0");
  EXPECT_EQ(error_of("-0"), "0");
  EXPECT_EQ(error_of("007"), "7");
  EXPECT_EQ(error_of("1073741824"), "1073741824");
  for (const char* text : {"+0", " 0", "0 ", "\t1", "1x", "0x1", "", "-", "-1", "-99999999999999999999"}) {
    EXPECT_EQ(error_of(text), "must be an integer of at least 0") << '"' << text << '"';
  }
  EXPECT_EQ(error_of("99999999999999999999"), "is too large; must be an integer from 0 to 1073741824");
  EXPECT_EQ(error_of("1073741825"), "is too large; must be an integer from 0 to 1073741824");
  EXPECT_EQ(error_of("8", 7), "is too large; must be an integer from 0 to 7");
  EXPECT_EQ(error_of("99999999999999999999", 7), "is too large; must be an integer from 0 to 7");
  EXPECT_EQ(error_of("-1", 7), "must be an integer from 0 to 7");
}

// Hostile or broken files end in an error, not in a stack overflow of the
// recursive parser or in a message that quotes megabytes.
TEST(PerfTable, DeepNestingAndDirectoriesAreErrors) {
  const std::string deep = "{\"version\":1,\"entries\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    PerfTable::from_json(deep, "deep.json");
    ADD_FAILURE() << "a 100000-deep document was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "perf_table");
    EXPECT_EQ(e.value(), "deep.json");
    EXPECT_NE(e.rule().find("nests deeper"), std::string::npos) << e.rule();
  }
  std::string many;
  for (int i = 0; i < 50000; ++i) many += i ? ",1" : "1";
  try {
    PerfTable::from_json("{\"version\":1,\"entries\":[{\"arch\":[" + many + "]}]}");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "perf_table.entries[0].arch");
    EXPECT_LT(e.value().size(), 100u) << "the quoted value is cut";
  }
  try {
    PerfTable::from_json("{\"version\":" + std::string(500, '9') + "}");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "perf_table") << "a number out of range is an input error";
  }
  try {
    PerfTable::load(std::filesystem::temp_directory_path().string(), "HELIXMLA_PERF_TABLE");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "HELIXMLA_PERF_TABLE");
    EXPECT_NE(e.rule().find("directory"), std::string::npos) << e.rule();
  }
}

}  // namespace
}  // namespace helixmla

// The TensorRT-LLM routing case (shared/seed-scenarios.md) replayed from the
// `trtllm` profile: one test per row of the expected-decisions table, the
// Kimi K3 failure from `trtllm-before`, and schema errors that name the field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/candidates.hpp"
#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/profile.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

std::string profile_text(const std::string& name) {
  std::ifstream in(std::string(HELIXMLA_SOURCE_DIR) + "/profiles/" + name + ".json");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const Profile& trtllm() {
  static const Profile profile = load_profile("trtllm");
  return profile;
}

const Profile& trtllm_before() {
  static const Profile profile = load_profile("trtllm-before");
  return profile;
}

Environment machine(Arch arch) {
  Environment env;
  env.arch = arch;
  env.nvrtc = true;
  env.device_count = 1;
  return env;
}

// A Helix generation phase as the engine hands it over: stats in float32
// [tokens, H, 2], tensors on the GPU.
PhaseShape helix_generation(std::int32_t heads, std::int32_t page, DType kv, std::int32_t q_len = 1,
                            std::int32_t batch = 1, std::int32_t cp = 4) {
  PhaseShape s;
  s.phase = PhaseKind::generation;
  s.num_heads = heads;
  s.page_size = page;
  s.kv_dtype = kv;
  s.q_dtype = s.out_dtype = kv == DType::fp16 ? DType::fp16 : DType::bf16;
  s.q_len = q_len;
  s.max_q_len = q_len <= 1 ? 1 : (q_len <= 2 ? 2 : (q_len <= 4 ? 4 : 8));
  s.batch_bucket = batch_bucket_of(batch);
  s.helix = true;
  s.cp_size = cp;
  s.has_stats = true;
  s.stats_fp32_contiguous = true;
  s.on_device = true;
  return s;
}

const Candidate& candidate(const Decision& d, const std::string& name) {
  for (const Candidate& c : d.candidates) {
    if (c.backend == name) return c;
  }
  throw std::runtime_error("no candidate " + name);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Decision select(const Profile& profile, Arch arch, const PhaseShape& shape) {
  return Selector(profile.backends, machine(arch)).select_uncached(shape);
}

TEST(TrtllmProfile, DescribesThreeProfileOnlyBackendsInOrder) {
  const Selector selector(trtllm().backends, machine(Arch::sm103));
  ASSERT_EQ(selector.backends().size(), 3u);
  EXPECT_EQ(selector.backends()[0]->name(), "cute_dsl");
  EXPECT_EQ(selector.backends()[1]->name(), "flashinfer_trtllm_gen");
  EXPECT_EQ(selector.backends()[2]->name(), "fallback");
  for (const BackendPtr& b : selector.backends()) EXPECT_FALSE(b->executable());
  EXPECT_EQ(trtllm().phases, std::vector<PhaseKind>{PhaseKind::generation});

  const auto inventory = selector.backends()[2]->catalog().inventory(machine(Arch::sm103));
  ASSERT_EQ(inventory.size(), 2u);
  EXPECT_EQ(inventory[0].name, "keeps_ab_tile64/page32");
  EXPECT_TRUE(inventory[0].precompiled);
  EXPECT_FALSE(inventory[1].precompiled);
}

// Row: Kimi K3 TP2/CP4: Helix decode, H=48, page 64, SM103, fp8 or bf16 KV -> cute_dsl.
TEST(TrtllmProfile, KimiK3HelixDecodeGoesToCuteDsl) {
  for (DType kv : {DType::fp8_e4m3, DType::bf16}) {
    const Decision d = select(trtllm(), Arch::sm103, helix_generation(48, 64, kv));
    EXPECT_EQ(d.choice, "cute_dsl") << to_string(kv);
    const Candidate& cute = candidate(d, "cute_dsl");
    EXPECT_TRUE(has(cute.reason, "correctness admission: Helix single-token decode with 32 < H < 64"))
        << cute.reason;
    EXPECT_TRUE(has(cute.reason, "the performance gate is skipped")) << cute.reason;
    EXPECT_EQ(cute.kernel, "cute_dsl_mla_decode/page64");
    // The fallback would not have had a kernel: helixmla records why.
    EXPECT_TRUE(has(candidate(d, "fallback").reason,
                    "no kernel: Trtllm-gen kernels not found (tileSizeQ=64, numTokensPerPage=64)"));
    EXPECT_TRUE(has(candidate(d, "flashinfer_trtllm_gen").reason, "never serves Helix"));
    for (const Candidate& c : d.candidates) EXPECT_FALSE(fails_at_run(c));
  }
}

// Row: same, before the fix -> fallback, which has no kernel.
TEST(TrtllmBeforeProfile, KimiK3FallsThroughToTheFallbackWithoutAKernel) {
  for (DType kv : {DType::fp8_e4m3, DType::bf16}) {
    const Decision d = select(trtllm_before(), Arch::sm103, helix_generation(48, 64, kv));
    EXPECT_EQ(d.choice, "fallback") << to_string(kv);
    const Candidate& cute = candidate(d, "cute_dsl");
    EXPECT_FALSE(cute.capable);
    EXPECT_TRUE(has(cute.reason, "performance gate rejects")) << cute.reason;
    const Candidate& fallback = candidate(d, "fallback");
    EXPECT_TRUE(fails_at_run(fallback)) << fallback.reason;
    EXPECT_TRUE(has(fallback.reason, "fails at run: Trtllm-gen kernels not found (tileSizeQ=64, numTokensPerPage=64)"))
        << fallback.reason;
    EXPECT_TRUE(has(d.trace(), "Trtllm-gen kernels not found")) << d.trace();
  }
  // On the one page size the KeepsAb kernel was built for, the old routing worked.
  const Decision page32 = select(trtllm_before(), Arch::sm103, helix_generation(48, 32, DType::bf16));
  EXPECT_EQ(page32.choice, "fallback");
  EXPECT_FALSE(fails_at_run(candidate(page32, "fallback")));
  EXPECT_EQ(candidate(page32, "fallback").kernel, "keeps_ab_tile64/page32");
}

// Row: same on SM100 -> cute_dsl.
TEST(TrtllmProfile, KimiK3OnSm100GoesToCuteDsl) {
  for (DType kv : {DType::fp8_e4m3, DType::bf16}) {
    EXPECT_EQ(select(trtllm(), Arch::sm100, helix_generation(48, 64, kv)).choice, "cute_dsl");
  }
  // cute_dsl exists only on SM100/SM103: on Hopper the same shape has no home.
  try {
    select(trtllm(), Arch::sm90, helix_generation(48, 64, DType::bf16));
    ADD_FAILURE() << "expected NoCapableBackend on sm90";
  } catch (const NoCapableBackend& e) {
    EXPECT_TRUE(has(e.what(), "cute_dsl: not available: cute_dsl is available on sm100, sm103 only; this is sm90"))
        << e.what();
  }
}

// Row: Helix decode, H=40, page 128, bf16, SM100 -> cute_dsl.
TEST(TrtllmProfile, Helix40HeadsOn128TokenPagesGoesToCuteDsl) {
  const Decision d = select(trtllm(), Arch::sm100, helix_generation(40, 128, DType::bf16));
  EXPECT_EQ(d.choice, "cute_dsl");
  EXPECT_TRUE(has(candidate(d, "cute_dsl").reason, "correctness admission")) << candidate(d, "cute_dsl").reason;

  // Outside Helix, 128-token pages are still admitted: only cute_dsl serves them.
  PhaseShape plain = helix_generation(40, 128, DType::bf16);
  plain.helix = false;
  plain.cp_size = 1;
  plain.has_stats = false;
  const Decision p = select(trtllm(), Arch::sm100, plain);
  EXPECT_EQ(p.choice, "cute_dsl");
  EXPECT_TRUE(has(candidate(p, "cute_dsl").reason, "128-token pages, which only cute_dsl serves"));

  // ... subject to the KV-pool dtype check after the gate.
  PhaseShape mismatched = helix_generation(40, 128, DType::bf16);
  mismatched.q_dtype = DType::fp16;
  const auto verdict = assess(*trtllm().backends[0], mismatched, machine(Arch::sm100));
  EXPECT_FALSE(verdict.capable);
  EXPECT_TRUE(has(verdict.reason, "the KV-pool dtype must equal the kernel dtype")) << verdict.reason;
}

// Row: Helix decode, H=48, page 32 -> the perf gate decides; fallback can serve.
TEST(TrtllmProfile, Helix48HeadsOn32TokenPagesIsLeftToThePerformanceGate) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    const Decision d = select(trtllm(), Arch::sm103, helix_generation(48, 32, kv));
    const Candidate& cute = candidate(d, "cute_dsl");
    EXPECT_FALSE(cute.capable);
    EXPECT_TRUE(has(cute.reason, "performance gate rejects")) << cute.reason;
    EXPECT_EQ(d.choice, "fallback");
    EXPECT_EQ(candidate(d, "fallback").kernel, "keeps_ab_tile64/page32");
    EXPECT_TRUE(has(candidate(d, "fallback").reason, "(precompiled)"));
  }
}

// Row: Helix decode, H = 16, 24, 64, 96, 128, page 64, below the batch floor
// -> the perf gate decides; the fallback serves (JIT).
TEST(TrtllmProfile, OtherHeadCountsOn64TokenPagesAreLeftToTheGateAndTheFallbackServes) {
  struct Case {
    std::int32_t heads;
    DType kv;
    const char* expected;
  };
  const Case cases[] = {
      // fp8, one request: (16,1), (24,1), (64,1) have no measured floor (reject);
      // (96,1) has floor 1 (admit); (128,1) has floor 64 (reject).
      {16, DType::fp8_e4m3, "fallback"}, {24, DType::fp8_e4m3, "fallback"}, {64, DType::fp8_e4m3, "fallback"},
      {96, DType::fp8_e4m3, "cute_dsl"}, {128, DType::fp8_e4m3, "fallback"},
      // bf16: the gate admits H in {6, 12, 16, 96} at any batch.
      {16, DType::bf16, "cute_dsl"}, {24, DType::bf16, "fallback"}, {64, DType::bf16, "fallback"},
      {96, DType::bf16, "cute_dsl"}, {128, DType::bf16, "fallback"},
  };
  for (const Case& c : cases) {
    const Decision d = select(trtllm(), Arch::sm103, helix_generation(c.heads, 64, c.kv));
    EXPECT_EQ(d.choice, c.expected) << "H=" << c.heads << " kv=" << to_string(c.kv);
    const Candidate& fallback = candidate(d, "fallback");
    EXPECT_TRUE(fallback.capable) << "H=" << c.heads << ": " << fallback.reason;
    EXPECT_EQ(fallback.kernel, "swaps_ab/page64");
    EXPECT_TRUE(has(fallback.reason, "(JIT)"));
  }
  // At the floor the gate admits: 128 heads, fp8, 64 requests.
  EXPECT_EQ(select(trtllm(), Arch::sm103, helix_generation(128, 64, DType::fp8_e4m3, 1, 64)).choice, "cute_dsl");
  const Decision below = select(trtllm(), Arch::sm103, helix_generation(128, 64, DType::fp8_e4m3, 1, 63));
  EXPECT_TRUE(has(candidate(below, "cute_dsl").reason, "batch bucket 32 is below the floor 64"))
      << candidate(below, "cute_dsl").reason;
}

// Row: TP4 x CP2 (H=24) Helix verify group, q_len 2..4 -> cute_dsl.
TEST(TrtllmProfile, HelixVerifyGroupsGoToCuteDsl) {
  for (std::int32_t q_len : {2, 3, 4}) {
    const Decision d = select(trtllm(), Arch::sm103, helix_generation(24, 64, DType::bf16, q_len, 8, 2));
    EXPECT_EQ(d.choice, "cute_dsl") << "q_len " << q_len;
    EXPECT_TRUE(has(candidate(d, "cute_dsl").reason, "every Helix verify group"));
    EXPECT_TRUE(has(candidate(d, "fallback").reason, "does not run Helix verify groups"));
  }
}

// Row: mixed batch of 2 contexts + a Helix verify group -> cute_dsl for the
// generation part, whose bounds are exactly the generation tokens.
TEST(TrtllmProfile, MixedBatchGenerationPartGoesToCuteDsl) {
  testing::BatchSpec spec;
  spec.heads = 24;
  spec.contexts = 2;
  spec.context_len = 8;
  spec.generations = 3;
  spec.q_len = 3;
  spec.kv_len = {100, 130, 70};
  spec.page_size = 64;
  spec.stats = true;
  testing::SyntheticBatch batch(spec);
  Problem whole = batch.problem();
  std::vector<std::int32_t> bounds;
  for (std::int32_t r = 0; r < whole.num_requests(); ++r) {
    for (std::int32_t t = 0; t < whole.q_len[r]; ++t) {
      bounds.push_back(static_cast<std::int32_t>(visible_kv(whole.kv_len[r], whole.q_len[r], t)));
    }
  }
  whole.helix.cp_size = 2;
  whole.helix.token_kv_bounds = bounds;

  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.context && plan.generation);
  const Problem& gen = plan.generation->problem;
  ASSERT_EQ(gen.helix.token_kv_bounds.size(), 9u);
  EXPECT_EQ(gen.helix.token_kv_bounds.data(), bounds.data() + 16);
  EXPECT_EQ(gen.stats.tokens, 9);

  const PhaseShape shape = shape_of(*plan.generation, whole);
  EXPECT_EQ(shape.q_len, 3);
  EXPECT_TRUE(shape.helix);
  EXPECT_TRUE(shape.has_stats);
  const Decision d = select(trtllm(), Arch::sm100, shape);
  EXPECT_EQ(d.choice, "cute_dsl");

  // The context part is not the generation libraries' to serve.
  const auto ctx = assess(*trtllm().backends[0], shape_of(*plan.context, whole), machine(Arch::sm100));
  EXPECT_TRUE(has(ctx.reason, "serves the generation part")) << ctx.reason;
}

// Row: batch with no generations -> cute_dsl rejects before shape derivation.
TEST(TrtllmProfile, BatchWithoutGenerationsIsRejectedFirst) {
  testing::BatchSpec spec;
  spec.heads = 48;
  spec.contexts = 2;
  spec.context_len = 16;
  spec.generations = 0;
  spec.page_size = 64;
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const Problem whole = batch.problem();
  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.context);
  const auto verdict = assess(*trtllm().backends[0], shape_of(*plan.context, whole), machine(Arch::sm103));
  EXPECT_FALSE(verdict.capable);
  EXPECT_EQ(verdict.reason,
            "check: the batch must contain generations (rejected before the decode shape is derived); "
            "got batch_has_generations=false");
}

// Row: cute_dsl's can_implement rejects -> not cute_dsl; clear reason.
TEST(TrtllmProfile, CuteDslKernelRejectionMovesTheChoice) {
  nlohmann::json doc = nlohmann::json::parse(profile_text("trtllm"));
  doc["backends"][0]["kernels"]["families"][0]["jit_page_sizes"] = {32, 128};
  doc["backends"][0]["kernels"]["families"][0]["missing"] = "no CuTe DSL kernel for {page_size}-token pages";
  const Profile narrowed = parse_profile(doc.dump());

  // 16 heads, bf16: admitted by the gate, but no kernel -> the fallback.
  const Decision d = select(narrowed, Arch::sm103, helix_generation(16, 64, DType::bf16));
  EXPECT_EQ(d.choice, "fallback");
  EXPECT_EQ(candidate(d, "cute_dsl").reason, "no kernel: no CuTe DSL kernel for 64-token pages");

  // Kimi K3 then has nowhere to go, and the error says why for each library.
  try {
    select(narrowed, Arch::sm103, helix_generation(48, 64, DType::fp8_e4m3));
    ADD_FAILURE() << "expected NoCapableBackend";
  } catch (const NoCapableBackend& e) {
    EXPECT_TRUE(has(e.what(), "cute_dsl: no kernel: no CuTe DSL kernel for 64-token pages")) << e.what();
    EXPECT_TRUE(has(e.what(), "flashinfer_trtllm_gen: check: never serves Helix")) << e.what();
    EXPECT_TRUE(has(e.what(), "fallback: no kernel: Trtllm-gen kernels not found")) << e.what();
  }
}

TEST(TrtllmProfile, HelixWithoutFloat32StatsIsRejected) {
  PhaseShape shape = helix_generation(48, 64, DType::bf16);
  shape.stats_fp32_contiguous = false;
  const auto verdict = assess(*trtllm().backends[0], shape, machine(Arch::sm103));
  EXPECT_TRUE(has(verdict.reason, "Helix needs a float32, contiguous softmax-stats buffer")) << verdict.reason;
}

TEST(TrtllmProfile, FlashinferServesPlainDecodeOnItsPageSizes) {
  PhaseShape plain = helix_generation(48, 64, DType::bf16);
  plain.helix = false;
  plain.cp_size = 1;
  plain.has_stats = false;
  EXPECT_EQ(select(trtllm(), Arch::sm100, plain).choice, "flashinfer_trtllm_gen");
  plain.num_heads = 100;  // 64 < H < 128
  const Decision d = select(trtllm(), Arch::sm100, plain);
  EXPECT_TRUE(has(candidate(d, "flashinfer_trtllm_gen").reason, "rejects 64 < heads < 128; got heads=100"));
  EXPECT_EQ(d.choice, "fallback");
}

// ---- loading and schema errors ---------------------------------------------

std::string field_of_error(const nlohmann::json& doc) {
  try {
    parse_profile(doc.dump());
  } catch (const InvalidArgument& e) {
    return e.field();
  }
  return "no error";
}

TEST(ProfileSchema, ErrorsNameTheJsonField) {
  const nlohmann::json good = nlohmann::json::parse(profile_text("trtllm"));
  EXPECT_EQ(field_of_error(good), "no error");
  auto with = [&](auto&& change) {
    nlohmann::json doc = good;
    change(doc);
    return field_of_error(doc);
  };
  EXPECT_EQ(with([](auto& d) { d["version"] = 7; }), "profile.version");
  EXPECT_EQ(with([](auto& d) { d["backendz"] = 1; }), "profile.backendz");
  EXPECT_EQ(with([](auto& d) { d["backends"][1].erase("name"); }), "profile.backends[1].name");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["archs"][1] = "sm107"; }), "profile.backends[0].archs[1]");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["priority"] = "high"; }), "profile.backends[0].priority");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["admission"][2]["require"]["headz"] = 3; }),
            "profile.backends[0].admission[2].require.headz");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["admission"][0]["require"]["batch_has_generations"] = "yes"; }),
            "profile.backends[0].admission[0].require.batch_has_generations");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["admission"][9]["performance_gate"][1]["min_batch"][2]["min_batch"] = 48; }),
            "profile.backends[0].admission[9].performance_gate[1].min_batch[2].min_batch");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["admission"][9]["performance_gate"][0]["when"]["kv_dtype"] = {"int4"}; }),
            "profile.backends[0].admission[9].performance_gate[0].when.kv_dtype[0]");
  EXPECT_EQ(with([](auto& d) { d["backends"][2]["kernels"]["lookup"] = "later"; }),
            "profile.backends[2].kernels.lookup");
  EXPECT_EQ(with([](auto& d) { d["backends"][2]["kernels"]["families"][0]["precompiled_page_sizes"][0] = 0; }),
            "profile.backends[2].kernels.families[0].precompiled_page_sizes[0]");
  EXPECT_EQ(with([](auto& d) { d["backends"][1]["name"] = "cute_dsl"; }), "profile.backends[1].name");
  EXPECT_EQ(with([](auto& d) { d["scope"]["phases"] = {"decode"}; }), "profile.scope.phases[0]");
  // Shape fields are counts: a negative bound or value is refused, not left to widen a range.
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["admission"][2]["require"]["heads"] = {{"min", -5}}; }),
            "profile.backends[0].admission[2].require.heads.min");
  EXPECT_EQ(with([](auto& d) { d["backends"][0]["admission"][2]["require"]["page_size"] = {64, -1}; }),
            "profile.backends[0].admission[2].require.page_size[1]");

  try {
    parse_profile("{ not json", "broken.json");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "profile");
    EXPECT_EQ(e.value(), "broken.json");
  }
}

// A value beyond int32 must not wrap into an ordinary-looking one
// (4294967344 heads would read as 48).
TEST(ProfileSchema, IntegersOutOfRangeAreRejectedBeforeNarrowing) {
  const nlohmann::json good = nlohmann::json::parse(profile_text("trtllm"));
  auto with = [&](const nlohmann::json::json_pointer& at, const nlohmann::json& value) {
    nlohmann::json doc = good;
    doc[at] = value;
    return field_of_error(doc);
  };
  const auto row = "/backends/0/admission/9/performance_gate/1/min_batch/0"_json_pointer;
  const std::string row_field = "profile.backends[0].admission[9].performance_gate[1].min_batch[0]";
  EXPECT_EQ(with(row / "heads", 4294967344LL), row_field + ".heads");
  EXPECT_EQ(with(row / "heads", 129), row_field + ".heads");
  EXPECT_EQ(with(row / "heads", 0), row_field + ".heads");
  EXPECT_EQ(with(row / "q_len", 4294967297LL), row_field + ".q_len");
  EXPECT_EQ(with(row / "q_len", (1 << 20) + 1), row_field + ".q_len");
  EXPECT_EQ(with(row / "q_len", -1), row_field + ".q_len");
  const auto family = "/backends/2/kernels/families/0"_json_pointer;
  EXPECT_EQ(with(family / "tile_q", 4294967360LL), "profile.backends[2].kernels.families[0].tile_q");
  EXPECT_EQ(with(family / "tile_q", 0), "profile.backends[2].kernels.families[0].tile_q");
  nlohmann::json edge = good;
  edge[row / "heads"] = 128;
  edge[row / "q_len"] = 1 << 20;
  EXPECT_EQ(field_of_error(edge), "no error");
}

// An empty scope would make `sweep --profile` select nothing and report success.
TEST(ProfileSchema, EmptyScopeListsAreRejected) {
  nlohmann::json doc = nlohmann::json::parse(profile_text("trtllm"));
  doc["scope"]["archs"] = nlohmann::json::array();
  EXPECT_EQ(field_of_error(doc), "profile.scope.archs");
  doc = nlohmann::json::parse(profile_text("trtllm"));
  doc["scope"]["phases"] = nlohmann::json::array();
  EXPECT_EQ(field_of_error(doc), "profile.scope.phases");
  // A backend with no architecture would be unavailable on every machine.
  doc = nlohmann::json::parse(profile_text("trtllm"));
  doc["backends"][1]["archs"] = nlohmann::json::array();
  EXPECT_EQ(field_of_error(doc), "profile.backends[1].archs");
}

// Descriptions are never read, but a number or a condition where a text
// belongs is an error in the file like any other.
TEST(ProfileSchema, DescriptionsMustBeText) {
  const nlohmann::json good = nlohmann::json::parse(profile_text("trtllm"));
  auto with = [&](const nlohmann::json::json_pointer& at, const nlohmann::json& value) {
    nlohmann::json doc = good;
    doc[at] = value;
    return field_of_error(doc);
  };
  EXPECT_EQ(with("/backends/1/description"_json_pointer, 5), "profile.backends[1].description");
  EXPECT_EQ(with("/backends/2/kernels/description"_json_pointer, nlohmann::json::array({1})),
            "profile.backends[2].kernels.description");
  EXPECT_EQ(with("/backends/2/kernels/families/1/description"_json_pointer, true),
            "profile.backends[2].kernels.families[1].description");
  EXPECT_EQ(with("/backends/0/admission/3/description"_json_pointer, nlohmann::json::object({{"heads", 1}})),
            "profile.backends[0].admission[3].description");
  EXPECT_EQ(with("/backends/0/admission/9/performance_gate/0/description"_json_pointer, 0.5),
            "profile.backends[0].admission[9].performance_gate[0].description");
  EXPECT_EQ(with("/backends/1/description"_json_pointer, "text"), "no error");
}

// A repeated architecture in the scope made `sweep --profile` go over it
// twice and count every shape twice; a backend available on none of the
// scope's architectures made every shape of the sweep unroutable.
TEST(ProfileSchema, ScopeListsDoNotRepeatAndBackendsMeetTheScope) {
  const nlohmann::json good = nlohmann::json::parse(profile_text("trtllm"));
  auto error_of = [&](auto&& change) {
    nlohmann::json doc = good;
    change(doc);
    try {
      parse_profile(doc.dump());
    } catch (const InvalidArgument& e) {
      return e.field() + " = " + e.value();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of([](auto& d) { d["scope"]["archs"] = {"sm100", "sm103", "sm_100"}; }),
            "profile.scope.archs[2] = \"sm_100\"");
  EXPECT_EQ(error_of([](auto& d) { d["scope"]["phases"] = {"generation", "generation"}; }),
            "profile.scope.phases[1] = \"generation\"");
  EXPECT_EQ(error_of([](auto& d) { d["backends"][2]["archs"] = {"sm103", "sm103"}; }),
            "profile.backends[2].archs[1] = \"sm103\"");
  EXPECT_EQ(error_of([](auto& d) { d["backends"][1]["archs"] = {"sm90", "sm120"}; }),
            "profile.backends[1].archs = [\"sm90\",\"sm120\"]");
  EXPECT_EQ(error_of([](auto& d) { d["backends"][1]["archs"] = {"sm90", "sm103"}; }), "no error");
}

// nlohmann would keep the last of a repeated key without a word: the name
// checked for path parts could be another than the one a reader sees.
TEST(ProfileSchema, RepeatedKeysAreRejected) {
  const auto error_of = [](const std::string& text) {
    try {
      parse_profile(text, "twice.json");
    } catch (const InvalidArgument& e) {
      return e.field() + " = " + e.value();
    }
    return std::string("no error");
  };
  const std::string good = profile_text("trtllm");
  EXPECT_EQ(error_of(good), "no error");
  std::string text = good;
  text.insert(text.find('{') + 1, R"("name": "../x",)");
  EXPECT_EQ(error_of(text), "profile.name = twice.json");
  text = good;
  const std::string second = R"("name": "flashinfer_trtllm_gen")";
  ASSERT_NE(text.find(second), std::string::npos);
  text.insert(text.find(second), R"("priority": 1, )");
  EXPECT_EQ(error_of(text), "profile.backends[1].priority = twice.json");
}

// A profile's name becomes part of file names; conditions nest, so their
// parser recurses: neither may be turned against the program.
TEST(ProfileSchema, NamesWithPathPartsAndDeepNestingAreRejected) {
  const nlohmann::json good = nlohmann::json::parse(profile_text("trtllm"));
  for (const char* name : {"../../etc", "/tmp/x", "a/b", ".hidden", ""}) {
    nlohmann::json doc = good;
    doc["name"] = name;
    EXPECT_EQ(field_of_error(doc), "profile.name") << name;
  }
  nlohmann::json doc = good;
  doc["backends"][0]["admission"][2]["require"]["not"] = nlohmann::json::object();
  EXPECT_EQ(field_of_error(doc), "profile.backends[0].admission[2].require.not");

  std::string deep = good.dump();
  const std::string require = "\"require\":{";
  const std::size_t at = deep.find(require) + require.size();
  std::string nested;
  for (int i = 0; i < 20000; ++i) nested += "\"not\":{";
  nested += "\"heads\":1";
  nested += std::string(20000, '}');
  deep.insert(at, nested + ",");
  try {
    parse_profile(deep, "deep.json");
    ADD_FAILURE() << "a 20000-deep condition was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "profile");
    EXPECT_NE(e.rule().find("nests deeper"), std::string::npos) << e.rule();
  }
  try {
    load_profile(std::filesystem::temp_directory_path().string() + "/");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.rule().find("directory"), std::string::npos) << e.rule();
  }
}

TEST(ProfileLoading, ResolvesNamesThroughTheProfileDirectory) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "helixmla-profile-test";
  std::filesystem::create_directories(dir);
  nlohmann::json doc = nlohmann::json::parse(profile_text("trtllm"));
  doc["name"] = "local-variant";
  std::ofstream(dir / "local-variant.json") << doc.dump();

  ::setenv("HELIXMLA_PROFILE_DIR", dir.c_str(), 1);
  const Profile local = load_profile("local-variant");
  EXPECT_EQ(local.name, "local-variant");
  EXPECT_EQ(local.origin, (dir / "local-variant.json").string());
  EXPECT_EQ(load_profile("trtllm").name, "trtllm");  // still found in the source tree
  ::unsetenv("HELIXMLA_PROFILE_DIR");

  EXPECT_EQ(load_profile((dir / "local-variant.json").string()).name, "local-variant");
  try {
    load_profile("no-such-profile");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "profile");
    EXPECT_TRUE(has(e.rule(), "no-such-profile.json")) << e.rule();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace helixmla

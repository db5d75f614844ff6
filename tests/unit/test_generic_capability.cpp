// The generic CUDA backend's capability answers: pure functions of shape and
// environment, which the selector and sweeps use without a GPU.
#if defined(HELIXMLA_WITH_CUDA)

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/generic_backend.hpp"
#include "cuda/tensorcore_backend.hpp"
#include "helixmla/backend.hpp"
#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/selector.hpp"

namespace helixmla {
namespace {

Environment environment(Arch arch) {
  Environment env;
  env.arch = arch;
  env.device_count = arch == Arch::none ? 0 : 1;
  env.built_backends = {"cpu", "cuda_generic"};
  return env;
}

PhaseShape device_shape() {
  PhaseShape shape;
  shape.num_heads = 48;
  shape.page_size = 64;
  shape.on_device = true;
  return shape;
}

TEST(GenericBackendCapability, AvailabilityFollowsBuildAndArch) {
  const BackendPtr backend = cuda::make_generic_backend();
  EXPECT_EQ(backend->name(), "cuda_generic");
  EXPECT_EQ(backend->priority(), 50);
  EXPECT_FALSE(backend->available(environment(Arch::none)));
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90, Arch::sm100, Arch::sm120}) {
    EXPECT_TRUE(backend->available(environment(arch))) << to_string(arch);
  }
  Environment not_built = environment(Arch::sm90);
  not_built.built_backends = {"cpu"};
  const Verdict verdict = backend->available(not_built);
  EXPECT_FALSE(verdict);
  EXPECT_FALSE(verdict.reason.empty());
}

TEST(GenericBackendCapability, ChecksEveryRuleWithAReason) {
  const BackendPtr backend = cuda::make_generic_backend();
  EXPECT_TRUE(backend->check(device_shape()));
  const auto refused = [&](PhaseShape shape, const std::string& needle) {
    const Verdict verdict = backend->check(shape);
    EXPECT_FALSE(verdict) << describe(shape);
    EXPECT_NE(verdict.reason.find(needle), std::string::npos) << verdict.reason;
  };
  PhaseShape host = device_shape();
  host.on_device = false;
  refused(host, "host memory");
  PhaseShape wide = device_shape();
  wide.dims = {1024, 64};
  refused(wide, "kv_lora_rank");
  PhaseShape rope = device_shape();
  rope.dims = {512, 128};
  refused(rope, "rope_dim");
  PhaseShape mixed = device_shape();
  mixed.q_dtype = mixed.out_dtype = DType::fp16;
  refused(mixed, "bf16 KV needs bf16");
  PhaseShape tree = device_shape();
  tree.mask = MaskKind::tree;
  refused(tree, "mask");
  PhaseShape layout = device_shape();
  layout.has_stats = true;
  layout.stats_fp32_contiguous = false;
  refused(layout, "float32");

  for (std::int32_t page : {1, 3, 16, 64, 127, 1024}) {
    for (std::int32_t heads : {1, 7, 48, 128}) {
      for (std::int32_t q_len : {1, 5, 16, 0}) {
        PhaseShape shape = device_shape();
        shape.page_size = page;
        shape.num_heads = heads;
        shape.q_len = q_len;
        shape.phase = q_len == 0 ? PhaseKind::context : PhaseKind::generation;
        shape.helix = heads % 2 == 1;
        shape.has_stats = shape.helix;
        EXPECT_TRUE(backend->check(shape)) << describe(shape);
        EXPECT_TRUE(backend->catalog().can_implement(shape, environment(Arch::sm90))) << describe(shape);
      }
    }
  }
}

TEST(GenericBackendCapability, CatalogHasOneKernelPerDtypePair) {
  const BackendPtr backend = cuda::make_generic_backend();
  const auto variants = backend->catalog().inventory(environment(Arch::sm90));
  std::vector<std::string> names;
  for (const KernelVariant& v : variants) {
    EXPECT_TRUE(v.precompiled);
    names.push_back(v.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"generic_q-bf16_kv-bf16", "generic_q-bf16_kv-fp8",
                                             "generic_q-fp16_kv-fp16", "generic_q-fp16_kv-fp8"}));
  PhaseShape shape = device_shape();
  shape.kv_dtype = DType::fp8_e4m3;
  KernelVariant chosen;
  ASSERT_TRUE(backend->catalog().can_implement(shape, environment(Arch::sm90), &chosen));
  EXPECT_EQ(chosen.name, "generic_q-bf16_kv-fp8");
}

// The kernels' wide loads need aligned tensors; a shape says how its tensors
// are aligned, so the selector routes a misaligned batch to a backend that
// takes it instead of to one whose prepare would refuse it.
TEST(CudaBackendsCapability, MisalignedTensorsRouteToTheBackendThatTakesThem) {
  Environment env = environment(Arch::sm90);
  env.built_backends.insert("cuda_tensorcore");
  env.nvrtc = true;
  PhaseShape shape = device_shape();
  shape.alignment.q = 4;  // a bf16 Q at an odd pair of elements
  const BackendPtr tensorcore = cuda::make_tensorcore_backend();
  const Verdict refused = tensorcore->check(shape);
  EXPECT_FALSE(refused);
  EXPECT_NE(refused.reason.find("q is 4-byte aligned"), std::string::npos) << refused.reason;
  const Selector selector({tensorcore, cuda::make_generic_backend()}, env);
  EXPECT_EQ(selector.select(shape).choice, "cuda_generic");

  shape.alignment.kv_pool = 8;  // neither backend's 16-byte KV loads can take it
  EXPECT_THROW(selector.select(shape), NoCapableBackend);
  shape.alignment = {};
  EXPECT_EQ(selector.select(shape).choice, "cuda_tensorcore");
}

// shape_of reads each tensor's alignment off its address.
TEST(CudaBackendsCapability, ShapesCarryTheirTensorsAlignment) {
  alignas(64) static std::byte memory[256];
  Problem p;
  p.num_heads = 4;
  p.softmax_scale = 0.1f;
  p.location = Location::cuda(0);
  p.q = memory + 4;
  p.out = memory + 2;
  p.kv.pool = memory + 64;
  const std::int32_t q_len[] = {1}, kv_len[] = {16}, pages[] = {0};
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.page_table = pages;
  p.kv.num_pages = 1;
  p.kv.page_size = 16;
  const PhasePlan plan = plan_phases(p);
  ASSERT_TRUE(plan.generation.has_value());
  const PhaseShape shape = shape_of(*plan.generation, p);
  EXPECT_EQ(shape.alignment, (AddressAlignment{4, 16, 2, 16}));  // no stats: nothing to align
  EXPECT_NE(describe(shape).find("aligned q=4 pool=16 out=2"), std::string::npos) << describe(shape);
}

}  // namespace
}  // namespace helixmla

#endif  // HELIXMLA_WITH_CUDA

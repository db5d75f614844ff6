// Helix with one rank per GPU at cp = 4 and 8, through NCCL and through the
// peer exchange: the Kimi K3 TP2/CP4 shape at cp = 4 (48 heads, 64-token
// pages, bf16 and fp8, decode and verify groups of 2 and 4) and cp = 8 with
// 16 and 128 heads, each against the float64 reference, eagerly and from
// CUDA graphs. Each case skips unless the machine has cp GPUs (the peer
// cases also need peer access between all of them).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "dist/helix_driver.hpp"
#include "dist/peer_exchange.hpp"
#include "multigpu/multigpu_support.hpp"
#include "support/gpu_skip.hpp"
#include "support/helix_step.hpp"

namespace helixmla {
namespace {

using testing::HelixStepCase;

HelixStepCase wide_case(std::string name, std::int32_t heads, DType kv_dtype) {
  HelixStepCase c;
  c.name = std::move(name);
  c.cp = 8;
  c.heads = heads;
  c.generations = 4;
  c.q_len = 1;
  c.kv_len = {4096, 700, 64, 3};  // every rank busy, then fewer, then only rank 0
  c.page_size = 64;
  c.kv_dtype = kv_dtype;
  c.dims = MlaDims{};
  return c;
}

using ManyGpuCase = std::tuple<dist::HelixMode, HelixStepCase>;

class HelixManyGpus : public ::testing::TestWithParam<ManyGpuCase> {};

TEST_P(HelixManyGpus, MatchesTheReference) {
  const auto& [mode, c] = GetParam();
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(c.cp);
#if !defined(HELIXMLA_WITH_NCCL)
  if (mode == dist::HelixMode::nccl) GTEST_SKIP() << "built without NCCL";
#endif
  std::vector<int> devices;
  for (int d = 0; d < c.cp; ++d) devices.push_back(d);
  if (mode == dist::HelixMode::peer && !dist::peer_exchange_possible(devices)) {
    GTEST_SKIP() << "GPUs 0.." << c.cp - 1 << " have no peer access between every pair";
  }
  testing::expect_multi_gpu_step_matches(mode, c, 0x4a11 + c.cp * 17 + c.q_len);
}

std::vector<HelixStepCase> many_gpu_cases() {
  return {testing::kimi_local_case("kimi_cp4_decode_bf16", 1, DType::bf16, 4),
          testing::kimi_local_case("kimi_cp4_decode_fp8", 1, DType::fp8_e4m3, 4),
          testing::kimi_local_case("kimi_cp4_verify2_bf16", 2, DType::bf16, 4),
          testing::kimi_local_case("kimi_cp4_verify4_fp8", 4, DType::fp8_e4m3, 4),
          wide_case("cp8_h16_bf16", 16, DType::bf16),
          wide_case("cp8_h128_bf16", 128, DType::bf16),
          wide_case("cp8_h128_fp8", 128, DType::fp8_e4m3)};
}

INSTANTIATE_TEST_SUITE_P(
    FourAndEightGpus, HelixManyGpus,
    ::testing::Combine(::testing::Values(dist::HelixMode::nccl, dist::HelixMode::peer),
                       ::testing::ValuesIn(many_gpu_cases())),
    [](const ::testing::TestParamInfo<ManyGpuCase>& info) {
      return std::string(std::get<0>(info.param) == dist::HelixMode::nccl ? "nccl_" : "peer_") +
             std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace helixmla

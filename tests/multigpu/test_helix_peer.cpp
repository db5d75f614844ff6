// Helix across two GPUs through the peer exchange (one kernel per GPU
// storing into the other's memory): the all-to-all against the tags every
// source sent, repeated so the per-block epochs advance; whole steps at the
// Kimi K3 TP2/CP4 local shape against the float64 reference, eagerly and
// from CUDA graphs; and a peer that arrives too late, which must end in
// RuntimeFailure within the timeout, never a hang.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "dist/helix_driver.hpp"
#include "dist/peer_exchange.hpp"
#include "helixmla/error.hpp"
#include "multigpu/multigpu_support.hpp"
#include "support/helix_step.hpp"

namespace helixmla {
namespace {

using testing::HelixStepCase;
using testing::RankSide;
using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_PEER_ACCESS()                                                              \
  do {                                                                                          \
    HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);                                                      \
    const std::vector<int> pair = {0, 1};                                                       \
    if (!dist::peer_exchange_possible(pair)) GTEST_SKIP() << "GPUs 0 and 1 have no peer access"; \
  } while (0)

TEST(HelixPeer, ExchangeDeliversEveryChunkStepAfterStep) {
  SKIP_WITHOUT_PEER_ACCESS();
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_peer_exchange(devices, dist::PeerOptions::from_environment());
  for (std::int32_t heads : {48, 7, 128}) {
    for (int step = 0; step < 3; ++step) {
      testing::expect_exchange_delivers(*exchange, {2, step == 2 ? 37 : 3, heads, 512, DType::fp32});
      if (HasFatalFailure()) return;
    }
  }
}

TEST(HelixPeer, ExchangesBackToBackKeepTheirOrder) {
  SKIP_WITHOUT_PEER_ACCESS();
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_peer_exchange(devices, dist::PeerOptions::from_environment());
  testing::expect_back_to_back_exchanges(*exchange, {2, 5, 48, 512, DType::fp32});
}

class HelixPeerStep : public ::testing::TestWithParam<HelixStepCase> {};

TEST_P(HelixPeerStep, KimiLocalShapeMatchesTheReference) {
  SKIP_WITHOUT_PEER_ACCESS();
  testing::expect_multi_gpu_step_matches(dist::HelixMode::peer, GetParam(), 0xbeef + GetParam().q_len);
}

INSTANTIATE_TEST_SUITE_P(TwoGpus, HelixPeerStep,
                         ::testing::Values(testing::kimi_local_case("decode_bf16", 1, DType::bf16),
                                           testing::kimi_local_case("decode_fp8", 1, DType::fp8_e4m3),
                                           testing::kimi_local_case("verify3_fp8", 3, DType::fp8_e4m3),
                                           testing::kimi_local_case("verify4_bf16", 4, DType::bf16)),
                         [](const ::testing::TestParamInfo<HelixStepCase>& info) { return info.param.name; });

void CUDART_CB sleep_on_stream(void* milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(milliseconds)));
}

TEST(HelixPeerFaults, LatePeerEndsInRuntimeFailureWithinTheTimeout) {
  SKIP_WITHOUT_PEER_ACCESS();
  dist::PeerOptions options;
  options.timeout = std::chrono::milliseconds(500);
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_peer_exchange(devices, options);
  const dist::ExchangeShape shape{2, 2, 48, 512, DType::fp32};
  RankSide r0(shape, 0, 0), r1(shape, 1, 1);
  // Rank 1's stream is held on the host far past the timeout.
  static int delay_ms = 3000;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(r1.stream, sleep_on_stream, &delay_ms), cudaSuccess);
  const std::vector<dist::RankBuffers> buffers = {r0.buffers(0), r1.buffers(1)};
  const std::vector<void*> streams = {r0.stream, r1.stream};
  const auto start = Clock::now();
  try {
    exchange->all_to_all(shape, buffers);
    exchange->wait(streams);
    FAIL() << "the exchange completed although rank 1 arrived after the timeout";
  } catch (const RuntimeFailure& e) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(waited, 0.4) << e.what();
    EXPECT_LT(waited, 2.5) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 waited"), std::string::npos) << e.what();
  }
  EXPECT_THROW(exchange->all_to_all(shape, buffers), RuntimeFailure) << "a failed exchange must refuse work";
  // Rank 1 arrives late, finds the error word rank 0 set on every rank and
  // writes nothing; drain before the buffers go.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(r1.stream), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(r0.stream), cudaSuccess);
}

}  // namespace
}  // namespace helixmla

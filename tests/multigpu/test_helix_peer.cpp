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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "compare.hpp"
#include "dist/helix_driver.hpp"
#include "dist/peer_exchange.hpp"
#include "helixmla/error.hpp"
#include "multigpu/multigpu_support.hpp"
#include "support/helix_step.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

using testing::HelixStepCase;
using testing::RankSide;
using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_PEER_ACCESS()                                                              \
  do {                                                                                          \
    SKIP_WITHOUT_TWO_GPUS();                                                                    \
    const std::vector<int> pair = {0, 1};                                                       \
    if (!dist::peer_exchange_possible(pair)) GTEST_SKIP() << "GPUs 0 and 1 have no peer access"; \
  } while (0)

TEST(HelixPeer, ExchangeDeliversEveryChunkStepAfterStep) {
  SKIP_WITHOUT_PEER_ACCESS();
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_peer_exchange(devices, dist::PeerOptions::from_environment());
  for (std::int32_t heads : {48, 7, 128}) {
    for (int step = 0; step < 3; ++step) {
      const dist::ExchangeShape shape{2, step == 2 ? 37 : 3, heads, 512, DType::fp32};
      RankSide r0(shape, 0, 0), r1(shape, 1, 1);
      const std::vector<dist::RankBuffers> buffers = {r0.buffers(0), r1.buffers(1)};
      exchange->all_to_all(shape, buffers);
      const std::vector<void*> streams = {r0.stream, r1.stream};
      exchange->wait(streams);
      r0.expect_received(shape, 0);
      r1.expect_received(shape, 1);
      if (HasFatalFailure()) return;
    }
  }
}

class HelixPeerStep : public ::testing::TestWithParam<HelixStepCase> {};

TEST_P(HelixPeerStep, KimiLocalShapeMatchesTheReference) {
  SKIP_WITHOUT_PEER_ACCESS();
  const HelixStepCase& c = GetParam();
  testing::SyntheticBatch batch(testing::batch_spec_of(c, 0xbeef + c.q_len));
  const Problem global = batch.problem();

  dist::HelixDriverOptions options;
  options.cp = c.cp;
  options.mode = dist::HelixMode::peer;
  options.devices = {0, 1};
  dist::HelixDriver driver(global, options);
  const testing::HelixStepResult step =
      testing::expect_helix_step_matches(driver, batch, c.name, {.out_rel_l2 = 1e-2, .stats = 2e-3});
  if (HasFatalFailure()) return;

  // Graph replays reuse the same buffers and flags: each must match again.
  std::string why;
  for (int replay = 0; replay < 3; ++replay) {
    driver.poison_outputs();
    const std::optional<double> graph_us = driver.graph_step_us(&why);
    ASSERT_TRUE(graph_us.has_value()) << why;
    std::vector<std::byte> replayed(batch.out_bytes(), std::byte{0xff});
    driver.fetch_output(replayed.data(), nullptr);
    EXPECT_TRUE(testing::compare(replayed.data(), global.out_dtype, step.expected.out).within(1e-2))
        << c.name << " replay " << replay;
  }
  std::cout << c.name << " (peer exchange): attention " << step.times.attention_us << " us, exchange "
            << step.times.exchange_us << " us, combine " << step.times.combine_us << " us\n";
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
  // Rank 1 arrives late, finds rank 0 gone and gives up too; drain before
  // the buffers go.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(r1.stream), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(r0.stream), cudaSuccess);
}

}  // namespace
}  // namespace helixmla

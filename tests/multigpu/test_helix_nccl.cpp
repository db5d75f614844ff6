// Helix across two GPUs through NCCL: the exchange against the in-process
// one, whole steps at the Kimi K3 TP2/CP4 local shape (48 heads, 64-token
// pages) against the float64 reference, one process per GPU with the id
// passed through a file, and faults: a peer that never joins the all-to-all
// or dies must end in RuntimeFailure within the timeout, never a hang.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/exchange.hpp"
#include "dist/helix_driver.hpp"
#include "dist/nccl_exchange.hpp"
#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"
#include "multigpu/multigpu_support.hpp"
#include "support/helix_step.hpp"

extern char** environ;

namespace helixmla {
namespace {

#if defined(HELIXMLA_WITH_NCCL)

using testing::HelixStepCase;
using testing::kimi_local_case;
using testing::RankSide;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(HelixNccl, ExchangeDeliversEveryChunk) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_nccl_exchange(devices, dist::NcclOptions::from_environment());
  for (std::int32_t heads : {48, 7}) testing::expect_exchange_delivers(*exchange, {2, 3, heads, 512, DType::fp32});
}

TEST(HelixNccl, ExchangesBackToBackKeepTheirOrder) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_nccl_exchange(devices, dist::NcclOptions::from_environment());
  testing::expect_back_to_back_exchanges(*exchange, {2, 5, 48, 512, DType::fp32});
}

class HelixNcclStep : public ::testing::TestWithParam<HelixStepCase> {};

TEST_P(HelixNcclStep, KimiLocalShapeMatchesTheReference) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  testing::expect_multi_gpu_step_matches(dist::HelixMode::nccl, GetParam(), 0xcafe + GetParam().q_len);
}

INSTANTIATE_TEST_SUITE_P(TwoGpus, HelixNcclStep,
                         ::testing::Values(kimi_local_case("decode_bf16", 1, DType::bf16),
                                           kimi_local_case("decode_fp8", 1, DType::fp8_e4m3),
                                           kimi_local_case("verify2_bf16", 2, DType::bf16),
                                           kimi_local_case("verify3_fp8", 3, DType::fp8_e4m3),
                                           kimi_local_case("verify4_bf16", 4, DType::bf16),
                                           kimi_local_case("verify4_fp8", 4, DType::fp8_e4m3)),
                         [](const ::testing::TestParamInfo<HelixStepCase>& info) { return info.param.name; });

TEST(HelixNcclFaults, PeerThatNeverJoinsTheExchangeEndsInRuntimeFailure) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  dist::NcclOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  const std::vector<int> devices = {0, 1};
  auto exchange = dist::make_nccl_exchange(devices, options);
  const dist::ExchangeShape shape{2, 2, 48, 512, DType::fp32};
  RankSide r0(shape, 0, 0);
  const std::vector<dist::RankBuffers> only_rank0 = {r0.buffers(0)};
  const auto start = Clock::now();
  try {
    exchange->all_to_all(shape, only_rank0);  // rank 1 never posts its half
    const std::vector<void*> streams = {r0.stream};
    exchange->wait(streams);
    FAIL() << "the exchange completed without rank 1";
  } catch (const RuntimeFailure& e) {
    const double waited = seconds_since(start);
    EXPECT_GE(waited, 2.5) << e.what();
    EXPECT_LT(waited, 10.0) << e.what();
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
  EXPECT_THROW(exchange->all_to_all(shape, only_rank0), RuntimeFailure) << "an aborted exchange must refuse work";
}

// ---- one process per GPU -------------------------------------------------

constexpr const char* kRoleVariable = "HELIXMLA_TEST_NCCL_ROLE";
// Where a child that ran its role without a failure says so: its exit status
// alone would also be 0 had its test been filtered out or skipped.
constexpr const char* kPassedFileVariable = "HELIXMLA_TEST_NCCL_PASSED_FILE";

void report_passed() {
  if (::testing::Test::HasFailure()) return;
  std::ofstream(std::getenv(kPassedFileVariable)) << "passed\n";
}

// Runs in a child process started by the tests below; skipped otherwise.
// Roles: "exchange" (a correct all-to-all), "quit" (join, then die), and
// "expect_failure" (the peer died: the exchange must fail within the timeout).
TEST(HelixNcclChild, Role) {
  const char* role_text = std::getenv(kRoleVariable);
  if (role_text == nullptr) GTEST_SKIP() << "runs only as a child of HelixNcclProcesses";
  const std::string role = role_text;
  const dist::NcclProcessInfo process = dist::NcclProcessInfo::from_environment();
  ASSERT_EQ(cudaSetDevice(process.device), cudaSuccess);
  auto exchange = dist::make_nccl_exchange(process, dist::NcclOptions::from_environment());
  if (role == "quit") std::_Exit(0);  // dies without teardown, like a crashed rank

  const dist::ExchangeShape shape{process.size, 3, 48, 512, DType::fp32};
  RankSide side(shape, process.rank, process.device);
  const std::vector<dist::RankBuffers> mine = {side.buffers(process.rank)};
  const std::vector<void*> streams = {side.stream};
  if (role == "exchange") {
    exchange->all_to_all(shape, mine);
    exchange->wait(streams);
    side.expect_received(shape, process.rank);
    report_passed();
    return;
  }
  ASSERT_EQ(role, "expect_failure");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the peer die first
  const auto start = Clock::now();
  EXPECT_THROW(
      {
        exchange->all_to_all(shape, mine);
        exchange->wait(streams);
      },
      RuntimeFailure);
  EXPECT_LT(seconds_since(start), 10.0);
  report_passed();
}

struct RankOutcome {
  int code = -2;        // exit status; -1: killed after the limit
  bool passed = false;  // the child ran its role and reported no failure
  bool operator==(const RankOutcome&) const = default;
};
std::ostream& operator<<(std::ostream& os, const RankOutcome& o) {
  return os << "{exit " << o.code << (o.passed ? ", passed}" : ", no pass reported}");
}

// Starts this test program once per rank, running HelixNcclChild.Role, and
// returns each rank's outcome.
std::vector<RankOutcome> run_ranks(const std::vector<std::string>& roles, const std::string& timeout_ms,
                                   std::chrono::seconds limit) {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  EXPECT_GT(n, 0);
  path[n > 0 ? n : 0] = '\0';
  const std::string id_file = "/tmp/helixmla-nccl-test-" + std::to_string(getpid()) + "-" +
                              std::to_string(Clock::now().time_since_epoch().count()) + ".id";
  std::remove(id_file.c_str());
  const auto passed_file = [&](std::size_t r) { return id_file + ".rank" + std::to_string(r) + ".passed"; };

  std::vector<pid_t> children;
  for (std::size_t r = 0; r < roles.size(); ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("HELIXMLA_", 0) == 0) continue;
      env_strings.push_back(entry);
    }
    env_strings.push_back(std::string(kRoleVariable) + "=" + roles[r]);
    env_strings.push_back("HELIXMLA_RANK=" + std::to_string(r));
    env_strings.push_back("HELIXMLA_WORLD_SIZE=" + std::to_string(roles.size()));
    env_strings.push_back("HELIXMLA_DEVICE=" + std::to_string(r));
    env_strings.push_back("HELIXMLA_NCCL_ID_FILE=" + id_file);
    env_strings.push_back("HELIXMLA_NCCL_TIMEOUT_MS=" + timeout_ms);
    env_strings.push_back(std::string(kPassedFileVariable) + "=" + passed_file(r));
    std::remove(passed_file(r).c_str());
    std::vector<char*> env;
    for (auto& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    std::string filter = "--gtest_filter=HelixNcclChild.Role";
    char* argv[] = {path, filter.data(), nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, path, nullptr, nullptr, argv, env.data()), 0);
    children.push_back(pid);
  }
  std::vector<int> codes(children.size(), -2);
  const auto deadline = Clock::now() + limit;
  std::size_t left = children.size();
  while (left > 0) {
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (codes[i] != -2) continue;
      int status = 0;
      if (waitpid(children[i], &status, WNOHANG) == children[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && Clock::now() > deadline) {
      for (std::size_t i = 0; i < children.size(); ++i) {
        if (codes[i] != -2) continue;
        kill(children[i], SIGKILL);
        waitpid(children[i], nullptr, 0);
        codes[i] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::remove(id_file.c_str());
  std::vector<RankOutcome> outcomes(codes.size());
  for (std::size_t r = 0; r < codes.size(); ++r) {
    outcomes[r].code = codes[r];
    outcomes[r].passed = std::ifstream(passed_file(r)).good();
    std::remove(passed_file(r).c_str());
  }
  return outcomes;
}

TEST(HelixNcclProcesses, OneProcessPerGpuExchanges) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  const auto outcomes = run_ranks({"exchange", "exchange"}, "30000", std::chrono::seconds(120));
  EXPECT_EQ(outcomes, std::vector<RankOutcome>({{0, true}, {0, true}})) << "exit -1: the rank hung and was killed";
}

TEST(HelixNcclProcesses, DeadPeerIsReportedWithinTheTimeout) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  const auto start = Clock::now();
  const auto outcomes = run_ranks({"expect_failure", "quit"}, "3000", std::chrono::seconds(90));
  EXPECT_EQ(outcomes, std::vector<RankOutcome>({{0, true}, {0, false}}))
      << "rank 0 must report RuntimeFailure, not hang (exit -1: killed)";
  EXPECT_LT(seconds_since(start), 90.0);
}

#else

TEST(HelixNccl, NeedsNccl) { GTEST_SKIP() << "built without NCCL"; }

#endif

}  // namespace
}  // namespace helixmla

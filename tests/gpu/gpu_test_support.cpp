#include "gpu/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/validate.hpp"

namespace helixmla::testing {

void grow_pool_past(BatchSpec& spec, std::int64_t bytes) {
  const std::int64_t page_bytes =
      std::int64_t{spec.page_size} * spec.dims.head_dim() * static_cast<std::int64_t>(dtype_size(spec.kv_dtype));
  spec.spare_pages = static_cast<std::int32_t>(bytes / page_bytes + 1);
}

std::int64_t rows_read_past(const SyntheticBatch& batch, std::int64_t offset) {
  const auto element = static_cast<std::int64_t>(dtype_size(batch.spec().kv_dtype));
  std::int64_t rows = 0;
  for (std::int32_t r = 0; r < static_cast<std::int32_t>(batch.kv_len_.size()); ++r) {
    for (std::int32_t position = 0; position < batch.kv_len_[r]; ++position) {
      rows += batch.pool_row(r, position) * element >= offset ? 1 : 0;
    }
  }
  return rows;
}

void put_nan_in_kv(SyntheticBatch& host, std::int32_t position) {
  store_from_float(host.pool_.data(), host.spec().kv_dtype, host.pool_row(0, position) + 3,
                   std::numeric_limits<float>::quiet_NaN());
}

void poison_outputs_finite(const Problem& device_problem, const SyntheticBatch& host) {
  check_cuda(cudaMemset(device_problem.out, 0x3c, host.out_bytes()), "poison out");
  if (device_problem.stats.present()) {
    check_cuda(cudaMemset(device_problem.stats.data, 0x3c, host.stats_.size() * sizeof(float)), "poison stats");
  }
  check_cuda(cudaDeviceSynchronize(), "poison");
}

void expect_first_request_nan(const SyntheticBatch& host, const std::string& label) {
  const DType out = host.spec().q_dtype;
  const std::int64_t rows = std::int64_t{host.spec().heads} * host.q_len_[0];
  const std::int64_t values = rows * host.spec().dims.kv_lora_rank;
  std::int64_t finite = 0;
  for (std::int64_t i = 0; i < values; ++i) finite += std::isfinite(load_as_float(host.out_.data(), out, i)) ? 1 : 0;
  EXPECT_EQ(finite, 0) << label << ": " << finite << " of request 0's " << values << " outputs finite";
  std::int64_t finite_l = 0;
  for (std::int64_t row = 0; row < rows; ++row) finite_l += std::isnan(host.stats_[2 * row + 1]) ? 0 : 1;
  EXPECT_EQ(finite_l, 0) << label << ": " << finite_l << " of request 0's rows with an l that is not NaN";
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
}

TestStream::TestStream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
TestStream::~TestStream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void TestStream::synchronize() const { check_cuda(cudaStreamSynchronize(stream_), "stream synchronize"); }

std::vector<ClaimedPhase> claim_phases(const Backend& backend, const Problem& device_problem, const Environment& env) {
  validate(device_problem);
  const PhasePlan plan = plan_phases(device_problem);
  std::vector<ClaimedPhase> phases;
  for (const std::optional<Phase>* phase : {&plan.context, &plan.generation}) {
    if (!phase->has_value()) continue;
    ClaimedPhase claimed{(*phase)->problem, shape_of(**phase, device_problem), {}};
    if (const Verdict verdict = backend.check(claimed.shape); !verdict) {
      throw std::runtime_error(std::string(backend.name()) + " check refused " + describe(claimed.shape) + ": " +
                               verdict.reason);
    }
    if (const Verdict verdict = backend.catalog().can_implement(claimed.shape, env, &claimed.kernel); !verdict) {
      throw std::runtime_error(std::string(backend.name()) + " catalog refused " + describe(claimed.shape) + ": " +
                               verdict.reason);
    }
    phases.push_back(claimed);
  }
  return phases;
}

int run_backend_phases(const Backend& backend, const Problem& device_problem, cudaStream_t stream) {
  std::vector<std::unique_ptr<PreparedRun>> runs;
  for (const ClaimedPhase& phase : claim_phases(backend, device_problem, Environment{})) {
    runs.push_back(backend.prepare(phase.problem, Workspace{}, stream));
    runs.back()->enqueue(stream);
  }
  check_cuda(cudaStreamSynchronize(stream), "run synchronize");
  return static_cast<int>(runs.size());
}

namespace {

void expect_within_tolerance(const SyntheticBatch& host, const Problem& problem, const NaiveResult& reference,
                             const std::string& label) {
  const double tolerance = output_tolerance(problem.kv.dtype);
  const Comparison out = compare(host.out_.data(), problem.out_dtype, reference.out);
  EXPECT_TRUE(out.within(tolerance)) << label << ": rel L2 " << out.rel_l2_err << ", max abs " << out.max_abs_err
                                     << ", non-finite " << out.non_finite;
  // Each request alone too: over the whole batch, a wrong short request
  // would hide behind the norm of the others.
  const std::size_t row_values = static_cast<std::size_t>(problem.num_heads * problem.dims.kv_lora_rank);
  std::size_t begin = 0;
  std::int32_t worst = -1;
  Comparison worst_request;
  for (std::int32_t r = 0; r < problem.num_requests(); ++r) {
    const std::size_t end = begin + static_cast<std::size_t>(problem.q_len[r]) * row_values;
    const Comparison request = compare(host.out_.data(), problem.out_dtype, reference.out, begin, end);
    if (!request.within(tolerance) && (worst < 0 || request.rel_l2_err > worst_request.rel_l2_err)) {
      worst = r;
      worst_request = request;
    }
    begin = end;
  }
  EXPECT_EQ(worst, -1) << label << ": request " << worst << " (kv_len " << problem.kv_len[worst] << ", q_len "
                       << problem.q_len[worst] << ") alone: rel L2 " << worst_request.rel_l2_err << ", non-finite "
                       << worst_request.non_finite;
  if (problem.stats.present()) {
    const StatsComparison stats = compare_stats(host.stats_, reference.stats);
    EXPECT_TRUE(stats.within(stats_tolerance(problem.kv.dtype)))
        << label << ": stats m err " << stats.max_m_err << ", l rel err " << stats.max_l_rel_err
        << ", empty mismatches " << stats.empty_mismatches << ", non-finite " << stats.non_finite;
  }
}

}  // namespace

void expect_matches_reference(SyntheticBatch& host, const std::string& label, const HelixSettings& helix) {
  Problem problem = host.problem();
  problem.helix = helix;
  expect_within_tolerance(host, problem, parallel_naive_attention(problem), label);
}

void expect_matches(SyntheticBatch& host, const NaiveResult& reference, const std::string& label) {
  expect_within_tolerance(host, host.problem(), reference, label);
}

}  // namespace helixmla::testing

#include "gpu/gpu_test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/validate.hpp"

namespace helixmla::testing {

namespace {

constexpr std::int32_t kHeadsPerTask = 8;

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
}

struct ReferenceTask {
  std::int32_t request = 0;
  std::int64_t token = 0;  // packed
  std::int32_t first_head = 0;
  std::int32_t heads = 0;
  std::int32_t visible = 0;
};

}  // namespace

NaiveResult parallel_naive_attention(const Problem& host) {
  const std::int64_t heads = host.num_heads;
  const std::int64_t head_dim = host.dims.head_dim();
  const std::int64_t rank = host.dims.kv_lora_rank;
  const std::int64_t q_row_bytes = head_dim * static_cast<std::int64_t>(dtype_size(host.q_dtype));

  std::vector<ReferenceTask> tasks;
  std::int64_t token = 0;
  for (std::int32_t r = 0; r < host.num_requests(); ++r) {
    for (std::int32_t t = 0; t < host.q_len[r]; ++t, ++token) {
      const std::int64_t visible = host.helix.token_kv_bounds.empty()
                                       ? visible_kv(host.kv_len[r], host.q_len[r], t)
                                       : host.helix.token_kv_bounds[token];
      for (std::int32_t h = 0; h < heads; h += kHeadsPerTask) {
        tasks.push_back({r, token, h, static_cast<std::int32_t>(std::min<std::int64_t>(kHeadsPerTask, heads - h)),
                         static_cast<std::int32_t>(visible)});
      }
    }
  }

  NaiveResult result;
  result.out.assign(static_cast<std::size_t>(token * heads * rank), 0.0);
  result.stats.assign(static_cast<std::size_t>(token * heads * 2), 0.0);
  static const std::int32_t kOneToken = 1;

  // A task is request r cut down to one query token that sees exactly its
  // visible prefix (kv_len = visible, q_len = 1), with `heads` of its heads.
  const auto run_task = [&](const ReferenceTask& task) {
    Problem sub = host;
    sub.num_heads = task.heads;
    sub.q = static_cast<const std::byte*>(host.q) + (task.token * heads + task.first_head) * q_row_bytes;
    sub.out = nullptr;
    sub.stats = {};
    sub.num_contexts = 0;
    sub.q_len = std::span<const std::int32_t>(&kOneToken, 1);
    sub.kv_len = std::span<const std::int32_t>(&task.visible, 1);
    sub.page_table = host.page_table.subspan(static_cast<std::size_t>(task.request) * host.page_table_stride,
                                             static_cast<std::size_t>(host.page_table_stride));
    sub.helix = {};
    const NaiveResult part = naive_attention(sub);
    const std::int64_t first_row = task.token * heads + task.first_head;
    std::copy(part.out.begin(), part.out.end(), result.out.begin() + first_row * rank);
    std::copy(part.stats.begin(), part.stats.end(), result.stats.begin() + first_row * 2);
  };

  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto worker = [&] {
    try {
      for (std::size_t i = next.fetch_add(1); i < tasks.size(); i = next.fetch_add(1)) run_task(tasks[i]);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next.store(tasks.size());
    }
  };
  const std::size_t workers =
      std::min<std::size_t>(tasks.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (std::size_t i = 1; i < workers; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return result;
}

TestStream::TestStream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
TestStream::~TestStream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void TestStream::synchronize() const { check_cuda(cudaStreamSynchronize(stream_), "stream synchronize"); }

int run_backend_phases(const Backend& backend, const Problem& device_problem, cudaStream_t stream) {
  validate(device_problem);
  const PhasePlan plan = plan_phases(device_problem);
  std::vector<std::unique_ptr<PreparedRun>> runs;
  for (const std::optional<Phase>* phase : {&plan.context, &plan.generation}) {
    if (!phase->has_value()) continue;
    const PhaseShape shape = shape_of(**phase, device_problem);
    if (const Verdict verdict = backend.check(shape); !verdict) {
      throw std::runtime_error(std::string(backend.name()) + " check refused " + describe(shape) + ": " +
                               verdict.reason);
    }
    if (const Verdict verdict = backend.catalog().can_implement(shape, Environment{}); !verdict) {
      throw std::runtime_error(std::string(backend.name()) + " catalog refused " + describe(shape) + ": " +
                               verdict.reason);
    }
    runs.push_back(backend.prepare((*phase)->problem, Workspace{}, stream));
    runs.back()->enqueue(stream);
  }
  check_cuda(cudaStreamSynchronize(stream), "run synchronize");
  return static_cast<int>(runs.size());
}

StatsComparison compare_stats(const std::vector<float>& candidate, const std::vector<double>& reference) {
  StatsComparison c;
  for (std::size_t row = 0; 2 * row + 1 < reference.size(); ++row) {
    const double m = candidate[2 * row];
    const double l = candidate[2 * row + 1];
    const double m_ref = reference[2 * row];
    const double l_ref = reference[2 * row + 1];
    if (std::isnan(m) || std::isnan(l)) {
      ++c.non_finite;
      continue;
    }
    if (m_ref == -INFINITY) {
      if (!(m == -INFINITY && l == 0.0)) ++c.empty_mismatches;
      continue;
    }
    if (!std::isfinite(m) || !std::isfinite(l)) {
      ++c.non_finite;
      continue;
    }
    c.max_m_err = std::max(c.max_m_err, std::fabs(m - m_ref) / (1.0 + std::fabs(m_ref)));
    c.max_l_rel_err = std::max(c.max_l_rel_err, std::fabs(l - l_ref) / l_ref);
  }
  return c;
}

}  // namespace helixmla::testing

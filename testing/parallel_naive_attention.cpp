#include "parallel_naive_attention.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace helixmla::testing {

namespace {

constexpr std::int32_t kHeadsPerTask = 8;

struct ReferenceTask {
  std::int32_t request = 0;
  std::int64_t token = 0;  // packed
  std::int32_t first_head = 0;
  std::int32_t heads = 0;
  std::int64_t visible = 0;
};

// One request's KV, decoded by the first of its tasks to run and dropped by
// the last: only requests with a task running hold theirs, so a long request
// costs one copy, not one per token and head group.
struct RequestKv {
  std::int64_t rows = 0;  // the most any of its tokens sees
  std::once_flag decoded;
  std::vector<double> kv;
  std::atomic<std::int32_t> unfinished{0};
};

}  // namespace

unsigned parallel_naive_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

NaiveResult parallel_naive_attention(const Problem& host) {
  const std::int64_t heads = host.num_heads;
  const std::int64_t rank = host.dims.kv_lora_rank;

  std::vector<ReferenceTask> tasks;
  std::vector<RequestKv> requests(static_cast<std::size_t>(host.num_requests()));
  std::int64_t token = 0;
  for (std::int32_t r = 0; r < host.num_requests(); ++r) {
    RequestKv& request = requests[static_cast<std::size_t>(r)];
    for (std::int32_t t = 0; t < host.q_len[r]; ++t, ++token) {
      const std::int64_t visible = naive_visible_positions(host, r, t, token);
      request.rows = std::max(request.rows, visible);
      for (std::int32_t h = 0; h < heads; h += kHeadsPerTask) {
        tasks.push_back({r, token, h, static_cast<std::int32_t>(std::min<std::int64_t>(kHeadsPerTask, heads - h)),
                         visible});
        ++request.unfinished;
      }
    }
  }

  NaiveResult result;
  result.out.assign(static_cast<std::size_t>(token * heads * rank), 0.0);
  result.stats.assign(static_cast<std::size_t>(token * heads * 2), 0.0);

  const auto run_task = [&](const ReferenceTask& task) {
    RequestKv& request = requests[static_cast<std::size_t>(task.request)];
    std::call_once(request.decoded, [&] { request.kv = naive_request_kv(host, task.request, request.rows); });
    for (std::int64_t h = task.first_head; h < task.first_head + task.heads; ++h) {
      const std::int64_t row = task.token * heads + h;
      naive_attention_row(host, request.kv, row, task.visible, &result.out[static_cast<std::size_t>(row * rank)],
                          &result.stats[static_cast<std::size_t>(row * 2)]);
    }
    if (request.unfinished.fetch_sub(1) == 1) std::vector<double>().swap(request.kv);
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
  const std::size_t workers = std::min<std::size_t>(tasks.size(), parallel_naive_threads());
  std::vector<std::thread> pool;
  for (std::size_t i = 1; i < workers; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return result;
}

}  // namespace helixmla::testing

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
      const std::int64_t visible = naive_visible_positions(host, r, t, token);
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

}  // namespace helixmla::testing

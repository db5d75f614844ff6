// OncePerKey: one make per key, keys made independently (a JIT compile of
// one kernel variant must not hold up another's), failures retried.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda/once_per_key.hpp"

namespace helixmla::cuda {
namespace {

TEST(OncePerKey, MakesEachKeyOnceForEveryCaller) {
  OncePerKey<int, int> values;
  std::atomic<int> makes{0};
  std::vector<std::thread> threads;
  std::vector<int> got(8, -1);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      got[static_cast<std::size_t>(i)] = values.get(7, [&] {
        ++makes;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return 49;
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(makes.load(), 1);
  for (int v : got) EXPECT_EQ(v, 49);
}

TEST(OncePerKey, OneKeysMakeDoesNotHoldUpAnother) {
  OncePerKey<int, int> values;
  std::promise<void> second_made;
  std::future<void> second_done = second_made.get_future();
  // Key 1's make waits (bounded) for key 2's, which can only finish if the
  // map is not locked across makes.
  auto first = std::async(std::launch::async, [&] {
    return values.get(1, [&] { return second_done.wait_for(std::chrono::seconds(10)) == std::future_status::ready; });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(values.get(2, [] { return 2; }), 2);
  second_made.set_value();
  EXPECT_TRUE(first.get()) << "key 2 was made only after key 1's make gave up";
}

TEST(OncePerKey, AFailedMakeIsTriedAgain) {
  OncePerKey<int, int> values;
  EXPECT_THROW(values.get(3, []() -> int { throw std::runtime_error("compile failed"); }), std::runtime_error);
  EXPECT_EQ(values.get(3, [] { return 9; }), 9);
  EXPECT_EQ(values.get(3, [] { return 10; }), 9);
}

// A caller waiting on a key while its make throws must make the key itself
// (libstdc++'s call_once left such waiters hung on some platforms, GCC PR
// 66146). Bounded: a hung waiter fails the test instead of hanging it.
TEST(OncePerKey, AWaiterOfAMakeThatThrowsMakesTheKeyItself) {
  // Shared with the waiter, which outlives the test if it hangs.
  auto values = std::make_shared<OncePerKey<int, int>>();
  std::promise<void> first_started;
  auto first = std::async(std::launch::async, [&] {
    return values->get(5, [&]() -> int {
      first_started.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      throw std::runtime_error("compile failed");
    });
  });
  first_started.get_future().wait();
  auto waiter_result = std::make_shared<std::promise<int>>();
  std::future<int> waiter = waiter_result->get_future();
  std::thread([values, waiter_result] { waiter_result->set_value(values->get(5, [] { return 25; })); }).detach();
  EXPECT_THROW(first.get(), std::runtime_error);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the waiter hung";
  EXPECT_EQ(waiter.get(), 25);
}

}  // namespace
}  // namespace helixmla::cuda

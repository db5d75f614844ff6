// OncePerKey: one make per key, keys made independently (a JIT compile of
// one kernel variant must not hold up another's), failures retried.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
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

}  // namespace
}  // namespace helixmla::cuda

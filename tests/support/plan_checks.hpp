// Checks shared by the tests of the CUDA work plans (tensor-core and
// generic), whose item types differ but share kv_begin, kv_end and request.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

namespace helixmla::testing {

// How many items have an empty KV range (splits that a kept plan placed
// past its request's end), each expected to be request `request`'s; no
// item's range may be reversed.
template <typename Items>
std::int64_t empty_items_of(const Items& items, std::int32_t request) {
  std::int64_t empty = 0;
  for (const auto& item : items) {
    EXPECT_LE(item.kv_begin, item.kv_end);
    if (item.kv_begin == item.kv_end) {
      EXPECT_EQ(item.request, request);
      ++empty;
    }
  }
  return empty;
}

}  // namespace helixmla::testing

// The pinned staging pool under metadata that grows a little at a time, as a
// page table does when its width follows the batch's longest request: each
// lease is released before a slightly larger one is taken, so no pooled
// buffer fits the next. The pool must not keep one buffer per size it was
// asked for (pinned memory the process never gets back), but a few whose
// total stays within a small multiple of the largest request.
#include <gtest/gtest.h>

#include <cstddef>

#include "cuda/pinned_staging.hpp"
#include "support/gpu_skip.hpp"

namespace helixmla::cuda {
namespace {

TEST(PinnedStagingGpu, GrowingRequestsKeepThePoolWithinAFewTimesTheLargest) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const std::size_t before = pinned_staging_bytes();
  constexpr std::size_t kLargest = 400'000;
  for (std::size_t bytes = 100'000; bytes <= kLargest; bytes += 1'000) {
    const PinnedStaging staging(bytes);
    ASSERT_NE(staging.data(), nullptr) << bytes;
  }
  const std::size_t grown = pinned_staging_bytes() - before;
  EXPECT_LE(grown, 4 * kLargest) << "the pool made " << grown << " pinned bytes for 301 requests of 100-400 KB";
}

}  // namespace
}  // namespace helixmla::cuda

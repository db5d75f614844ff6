// Helpers shared by the GPU tests: a stream, and running a backend over every
// phase of a batch. The float64 reference and the comparisons live in testing/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "helixmla/backend.hpp"
#include "compare.hpp"
#include "parallel_naive_attention.hpp"

namespace helixmla::testing {

// Owning CUDA stream (non-blocking), so tests do not rely on the legacy
// default stream's implicit synchronisation.
class TestStream {
 public:
  TestStream();
  ~TestStream();
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Validates the device problem, splits it with plan_phases, checks that
// `backend` is capable of each phase (throws otherwise), prepares and
// enqueues each on `stream` and waits. Returns the number of phases run.
int run_backend_phases(const Backend& backend, const Problem& device_problem, cudaStream_t stream);


}  // namespace helixmla::testing

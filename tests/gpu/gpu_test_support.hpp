// Helpers shared by the GPU tests: a float64 reference fast enough for large
// parametrised sweeps, running a backend over every phase of a batch, and
// statistics comparison that understands empty rows (-inf, 0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "helixmla/backend.hpp"
#include "naive_attention.hpp"

namespace helixmla::testing {

// testing::naive_attention of a host problem, computed as independent
// sub-problems (one query token and a few heads each) on all cores. Honors
// the verify-group mask and Helix bounds like naive_attention.
NaiveResult parallel_naive_attention(const Problem& host);

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

struct StatsComparison {
  std::int64_t empty_mismatches = 0;  // reference (-inf, 0) rows not reproduced exactly
  std::int64_t non_finite = 0;        // NaN anywhere, or inf where the reference is finite
  double max_m_err = 0.0;             // |m - m_ref| / (1 + |m_ref|)
  double max_l_rel_err = 0.0;         // |l - l_ref| / l_ref
  bool within(double tolerance) const {
    return empty_mismatches == 0 && non_finite == 0 && max_m_err <= tolerance && max_l_rel_err <= tolerance;
  }
};

// `candidate` and `reference` are [rows, 2] = (m, l).
StatsComparison compare_stats(const std::vector<float>& candidate, const std::vector<double>& reference);

}  // namespace helixmla::testing

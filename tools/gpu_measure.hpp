// Device ceilings and kernel timing for `bench` and `tune` (DESIGN §7):
// CUDA events, warm-up, median of many iterations, CUDA graphs, inputs
// rotated so that the cache does not serve them.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "helixmla/backend.hpp"

namespace helixmla::tools {

struct Ceilings {
  double copy_gbs = 0.0;      // device-to-device copy, bytes read + written
  double bf16_tflops = 0.0;   // cuBLAS bf16 8192^3 on random data
};
Ceilings measure_ceilings(cudaStream_t stream);

// Isolated iterations wait for each other, so each includes the host's
// launch latency; queued ones are all enqueued first (no device idle between
// them), which is the device time an engine's step pays per call.
struct Timing {
  double isolated_median_us = 0.0;
  double isolated_min_us = 0.0;
  double isolated_max_us = 0.0;
  double queued_median_us = 0.0;
  double queued_mean_us = 0.0;  // what back-to-back replays cost per call
};
// Times the runs round-robin, isolated and then queued, each replayed from a
// captured CUDA graph when `graphs` is set.
Timing time_runs(const std::vector<PreparedRun*>& runs, cudaStream_t stream, int warmup, int iterations,
                 bool graphs);

// Median microseconds of `iterations` queued calls of `enqueue(i)`, each
// timed with events after `warmup` untimed calls.
double median_enqueue_us(cudaStream_t stream, int warmup, int iterations, const std::function<void(int)>& enqueue);

void cuda_ok(cudaError_t status, const char* what);

}  // namespace helixmla::tools

#endif

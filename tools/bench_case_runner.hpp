// Runs one benchmark case on the GPU: device-drawn inputs rotated past the
// L2 cache, the runtime's (or a forced) backend, timing, and a check of the
// first requests against the float64 reference.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>

#include "bench_suite.hpp"
#include "device_batch.hpp"
#include "gpu_measure.hpp"
#include "helixmla/runtime.hpp"

namespace helixmla::tools {

struct CaseOptions {
  int iterations = 50;
  bool graphs = true;
  bool verify = true;
  std::string backend;  // overrides the runner's forced backend for this case
  bool gather = false;  // also time a read of the same KV rows through the same page tables
  bool host = false;    // also time the host: prepare, and enqueue of one more layer
};

// Host time of one call, median over repeats with the stream idle before
// each (no queue back-pressure), in microseconds; and per layer of a whole
// step of layers enqueued back to back, as an engine runs them.
struct HostTiming {
  double prepare_us = 0.0;        // Runtime::prepare of the case's batch
  double layer_enqueue_us = 0.0;  // PreparedRun::enqueue(LayerTensors) of a prepared run
  double step_layer_us = 0.0;     // the same per layer, a step's layers enqueued back to back
};

struct CaseResult {
  std::string backend;
  Timing timing;
  double rel_l2_err = 0.0;
  bool correct = false;
  double gather_us = 0.0;  // the gather ceiling's median (testing/gather_read.hpp), when asked for
  HostTiming host;         // when asked for
};

class CaseRunner {
 public:
  explicit CaseRunner(std::string forced_backend = {});
  ~CaseRunner();
  CaseRunner(const CaseRunner&) = delete;
  CaseRunner& operator=(const CaseRunner&) = delete;

  CaseResult run(const BenchCase& c, const CaseOptions& options);
  cudaStream_t stream() const { return stream_; }
  const std::string& device_name() const { return device_name_; }
  const Environment& environment() const { return env_; }

 private:
  const Runtime& runtime_for(const std::string& backend);
  double time_gather(const std::vector<std::unique_ptr<testing::DeviceSyntheticBatch>>& batches, int iterations);
  HostTiming time_host(const Runtime& runtime, const std::vector<std::unique_ptr<testing::DeviceSyntheticBatch>>& batches,
                       PreparedRun& run);

  std::string forced_;
  Environment env_;
  cudaStream_t stream_ = nullptr;
  std::string device_name_;
  std::size_t l2_bytes_ = 0;
  int sm_count_ = 0;
  std::map<std::string, std::unique_ptr<Runtime>> runtimes_;
};

}  // namespace helixmla::tools

#endif

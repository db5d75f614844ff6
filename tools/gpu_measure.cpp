#if defined(HELIXMLA_WITH_CUDA)

#include "gpu_measure.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "device_batch.hpp"
#include "device_fill.hpp"
#include "helixmla/error.hpp"

namespace helixmla::tools {

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
}

namespace {

// Sorted per-iteration times in microseconds of `body`, after `warmup` calls.
// Isolated: each iteration waits for the previous one to finish, so its time
// includes the host's submission latency (the device idles until the launch
// arrives). Queued: all iterations are enqueued before any wait, each
// bracketed by the end mark of the one before, so the device never idles and
// each time is the device time of one iteration, as in an engine's step.
template <typename Body>
std::vector<double> event_times_us(cudaStream_t stream, int warmup, int iterations, bool queued, Body body) {
  std::vector<cudaEvent_t> marks(static_cast<std::size_t>(queued ? iterations + 1 : 2));
  for (cudaEvent_t& mark : marks) cuda_ok(cudaEventCreate(&mark), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) body(i);
  auto elapsed_us = [](cudaEvent_t from, cudaEvent_t to) {
    float ms = 0.0f;
    cuda_ok(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
    return ms * 1000.0;
  };
  std::vector<double> times;
  if (queued) {
    cuda_ok(cudaEventRecord(marks[0], stream), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) {
      body(i);
      cuda_ok(cudaEventRecord(marks[static_cast<std::size_t>(i) + 1], stream), "cudaEventRecord");
    }
    cuda_ok(cudaEventSynchronize(marks.back()), "cudaEventSynchronize");
    for (std::size_t i = 0; i + 1 < marks.size(); ++i) times.push_back(elapsed_us(marks[i], marks[i + 1]));
  } else {
    for (int i = 0; i < iterations; ++i) {
      cuda_ok(cudaEventRecord(marks[0], stream), "cudaEventRecord");
      body(i);
      cuda_ok(cudaEventRecord(marks[1], stream), "cudaEventRecord");
      cuda_ok(cudaEventSynchronize(marks[1]), "cudaEventSynchronize");
      times.push_back(elapsed_us(marks[0], marks[1]));
    }
  }
  for (cudaEvent_t mark : marks) cudaEventDestroy(mark);
  std::sort(times.begin(), times.end());
  return times;
}

cudaGraphExec_t capture_run(PreparedRun& run, cudaStream_t stream) {
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  run.enqueue(stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  return exec;
}

}  // namespace

double median_enqueue_us(cudaStream_t stream, int warmup, int iterations, const std::function<void(int)>& enqueue) {
  const auto times = event_times_us(stream, warmup, iterations, true, enqueue);
  return times[times.size() / 2];
}

Ceilings measure_ceilings(cudaStream_t stream) {
  Ceilings c;
  constexpr std::size_t kCopyBytes = std::size_t{2} << 30;
  testing::DeviceBuffer src(kCopyBytes), dst(kCopyBytes);
  src.fill_bytes(0x5a);
  const double copy_us = median_enqueue_us(stream, 3, 20, [&](int) {
    cuda_ok(cudaMemcpyAsync(dst.data(), src.data(), kCopyBytes, cudaMemcpyDeviceToDevice, stream), "copy");
  });
  c.copy_gbs = 2.0 * kCopyBytes / (copy_us * 1e3);

  constexpr int n = 8192;
  const std::int64_t elements = std::int64_t{n} * n;
  testing::DeviceBuffer a(elements * 2), b(elements * 2), d(elements * 2);
  testing::fill_random_device(a.data(), DType::bf16, elements, 1.0f, 1.0f, 11);
  testing::fill_random_device(b.data(), DType::bf16, elements, 1.0f, 1.0f, 12);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw RuntimeFailure("cublasCreate failed");
  cublasSetStream(handle, stream);
  const float alpha = 1.0f, beta = 0.0f;
  const double gemm_us = median_enqueue_us(stream, 3, 10, [&](int) {
    if (cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_16BF, n, b.data(),
                     CUDA_R_16BF, n, &beta, d.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      throw RuntimeFailure("cublasGemmEx failed");
    }
  });
  cublasDestroy(handle);
  c.bf16_tflops = 2.0 * n * double(n) * n / (gemm_us * 1e6);
  return c;
}

Timing time_runs(const std::vector<PreparedRun*>& runs, cudaStream_t stream, int warmup, int iterations,
                 bool graphs) {
  std::vector<cudaGraphExec_t> execs;
  if (graphs) {
    for (PreparedRun* run : runs) execs.push_back(capture_run(*run, stream));
  }
  auto launch = [&](int i) {
    const std::size_t k = static_cast<std::size_t>(i) % runs.size();
    if (graphs) {
      cuda_ok(cudaGraphLaunch(execs[k], stream), "cudaGraphLaunch");
    } else {
      runs[k]->enqueue(stream);
    }
  };
  const auto isolated = event_times_us(stream, warmup, iterations, false, launch);
  const auto queued = event_times_us(stream, warmup, iterations, true, launch);
  for (cudaGraphExec_t exec : execs) cudaGraphExecDestroy(exec);
  double queued_sum = 0.0;
  for (double t : queued) queued_sum += t;
  return {isolated[isolated.size() / 2], isolated.front(), isolated.back(), queued[queued.size() / 2],
          queued_sum / static_cast<double>(queued.size())};
}

}  // namespace helixmla::tools

#endif

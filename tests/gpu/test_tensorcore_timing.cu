// Timing of the tensor-core backend on the benchmark suite's shapes
// (bench/mla-decode-v1.csv), printed for the record, never asserted: CUDA
// graph replay, median of timed replays, against the device-to-device copy
// bandwidth measured in the same run. Inputs are drawn on the device
// (DeviceSyntheticBatch); the KV of every case is far larger than L2. Every
// variant's outputs of the first two requests are checked against the
// float64 CPU reference.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "compare.hpp"
#include "cuda/tensorcore_backend.hpp"
#include "cuda/tensorcore_run.hpp"
#include "device_batch.hpp"
#include "helixmla/validate.hpp"
#include "support/gpu_skip.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {
namespace {

void check(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

struct SuiteCase {
  int id;
  std::int32_t heads, q_len, batch, kv_len, page;
  DType kv;
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double copy_bandwidth() {
  const std::size_t bytes = std::size_t{1} << 31;
  DeviceBuffer a(bytes), b(bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(start);
    cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * bytes / (median(ms) * 1e-3);
}

TEST(TensorcoreTiming, SuiteShapesPrintTimes) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const BackendPtr backend = cuda::make_tensorcore_backend();
  const Environment env = Environment::detect();
  if (!backend->available(env)) GTEST_SKIP() << backend->available(env).reason;
  if (!env.nvrtc) GTEST_SKIP() << "the comparison engine is compiled just in time";

  const double copy = copy_bandwidth();
  std::printf("[timing] device-to-device copy: %.2f TB/s (read + write)\n", copy / 1e12);
  const SuiteCase cases[] = {
      {1, 128, 1, 128, 4096, 64, DType::bf16},   {2, 128, 2, 64, 8192, 64, DType::bf16},
      {3, 64, 1, 64, 8192, 64, DType::bf16},     {4, 48, 1, 64, 16384, 64, DType::bf16},
      {5, 16, 1, 128, 8192, 64, DType::bf16},    {6, 16, 4, 64, 8192, 64, DType::bf16},
      {7, 16, 1, 8, 131072, 64, DType::bf16},    {8, 128, 1, 1, 32768, 64, DType::bf16},
      {10, 48, 1, 64, 16384, 64, DType::fp8_e4m3}, {11, 16, 1, 128, 8192, 64, DType::fp8_e4m3},
      {12, 128, 1, 128, 4096, 64, DType::fp8_e4m3}, {13, 48, 1, 64, 16384, 32, DType::bf16},
      {14, 48, 1, 64, 16384, 128, DType::bf16},  {15, 16, 1, 128, 8192, 16, DType::bf16},
      {16, 48, 1, 64, 16384, 1, DType::bf16}};
  std::printf("[timing] case  heads q_len batch   kv_len page kv    |      us     GB/s  TFLOP/s  %%copy\n");
  for (const SuiteCase& c : cases) {
    BatchSpec spec;
    spec.heads = c.heads;
    spec.q_len = c.q_len;
    spec.generations = c.batch;
    spec.kv_len = {c.kv_len};
    spec.page_size = c.page;
    spec.kv_dtype = c.kv;
    spec.kv_scale = c.kv == DType::fp8_e4m3 ? 1.0f / 64 : 1.0f;
    spec.spare_pages = 0;
    DeviceSyntheticBatch batch(spec);
    Problem p = batch.problem();
    const std::int64_t tokens = batch.metadata().num_tokens();
    validate(p);

    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // The default variant first; where 64-row tiles pad or just hold
    // H * q_len rows, also 16-row mma.sync tiles (one block per 16 rows, each
    // reading the KV again through L2) for comparison.
    std::vector<cuda::TensorcoreVariant> variants{cuda::tensorcore_variant_of(p)};
    if (variants.front().rows == 64 && c.heads * c.q_len <= 64) {
      variants.push_back(variants.front());
      variants.back().rows = 16;
      variants.back().engine = cuda::TensorcoreEngine::mma_sync;
    }
    for (const cuda::TensorcoreVariant& variant : variants) {
      batch.poison_outputs(stream);
      auto run = cuda::prepare_tensorcore(p, variant, Workspace{}, stream);
      check(cudaStreamSynchronize(stream));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      run->enqueue(stream);
      check(cudaStreamEndCapture(stream, &graph));
      check(cudaGraphInstantiate(&exec, graph, 0));
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      std::vector<float> ms;
      for (int i = 0; i < 25; ++i) {
        cudaEventRecord(start, stream);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(stop, stream);
        check(cudaEventSynchronize(stop));
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        if (i >= 5) ms.push_back(t);
      }
      // The replays' outputs, poisoned before this variant ran.
      EXPECT_LE(first_requests_rel_l2(batch, 2), output_tolerance(c.kv)) << "case " << c.id << " " << variant.name();

      const double us = median(ms) * 1e3;
      const double flops = 2.0 * c.batch * double(c.kv_len) * c.q_len * c.heads * (576 + 512);
      const double bytes = double(c.batch) * c.kv_len * 576 * dtype_size(c.kv) +
                           double(tokens) * c.heads * (576 + 512) * 2;
      std::printf("[timing] %4d  %5d %5d %5d %8d %4d %-5s | %7.1f %8.1f %8.1f %6.1f  %s\n", c.id, c.heads,
                  c.q_len, c.batch, c.kv_len, c.page, std::string(to_string(c.kv)).c_str(), us,
                  bytes / us / 1e3, flops / us / 1e6, 100.0 * bytes / (us * 1e-6) / copy,
                  variant.name().c_str());
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace helixmla::testing

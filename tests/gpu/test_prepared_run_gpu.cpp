// How a prepared run meets layers and CUDA graphs, on both CUDA backends
// through the Runtime. One run prepared per decode step and enqueued on
// several layers' tensors: a mixed batch with a split request and
// statistics, two layers captured into one graph, each layer against the
// float64 reference with its own KV scale, the prepared layer's outputs
// left poisoned, misaligned layer tensors refused. And prepare itself
// refused on a capturing stream (its metadata upload must not be captured)
// but not beside one, and a run refreshed to the next step under its
// captured graph.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda/generic_backend.hpp"
#include "cuda/tensorcore_backend.hpp"
#include "device_batch.hpp"
#include "gpu/gpu_test_support.hpp"
#include "helixmla/error.hpp"
#include "helixmla/runtime.hpp"
#include "support/gpu_skip.hpp"
#include "support/host_checks.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {
namespace {

// Two contexts and three verify groups of 2, one of them long enough to be
// split, with statistics.
BatchSpec layer_spec(DType kv) {
  BatchSpec spec;
  spec.heads = 24;
  spec.contexts = 2;
  spec.context_len = 70;
  spec.generations = 3;
  spec.q_len = 2;
  spec.kv_len = {20000, 130, 301};
  spec.page_size = 64;
  spec.use_kv_dtype(kv);
  spec.stats = true;
  spec.seed = 11;
  return spec;
}

bool outputs_untouched(SyntheticBatch& host, DeviceBatch& device) {
  device.download_outputs();
  return outputs_untouched(host);
}

// The CUDA backends this GPU has, each behind a Runtime that is made to use it.
std::vector<std::unique_ptr<Runtime>> cuda_runtimes() {
  std::vector<std::unique_ptr<Runtime>> runtimes;
  const Environment env = Environment::detect();
  for (const BackendPtr& backend : {cuda::make_tensorcore_backend(), cuda::make_generic_backend()}) {
    if (!backend->available(env)) continue;
    RuntimeOptions options;
    options.forced_backend = std::string(backend->name());
    options.environment = env;
    runtimes.push_back(std::make_unique<Runtime>(options));
  }
  return runtimes;
}

TEST(LayerTensorsGpu, OnePreparedRunServesEveryLayerInOneGraph) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const auto runtimes = cuda_runtimes();
  if (runtimes.empty()) GTEST_SKIP() << "no CUDA backend available";
  for (const auto& runtime_ptr : runtimes) {
    const Runtime& runtime = *runtime_ptr;
    const std::string backend = runtime.options().forced_backend;
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      const std::string label = backend + " " + std::string(to_string(kv));
      SyntheticBatch first(layer_spec(kv));
      std::vector<SyntheticBatch> layers;
      layers.push_back(another_layer(first, 1));
      layers.push_back(another_layer(first, 2));
      DeviceBatch first_device(first);
      std::vector<std::unique_ptr<DeviceBatch>> devices;
      for (SyntheticBatch& layer : layers) devices.push_back(std::make_unique<DeviceBatch>(layer));
      TestStream stream;
      const Problem prepared = first_device.problem();
      DeviceBuffer workspace(runtime.workspace_bytes(prepared));
      auto run = runtime.prepare(prepared, {workspace.data(), workspace.bytes()}, stream.get());
      stream.synchronize();  // metadata uploads land before capture

      cudaGraph_t graph = nullptr;
      check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
      for (auto& device : devices) run->enqueue(layer_tensors(device->problem()), stream.get());
      check_cuda(cudaStreamEndCapture(stream.get(), &graph), "end capture");
      cudaGraphExec_t exec = nullptr;
      check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      first_device.poison_outputs();
      for (auto& device : devices) device->poison_outputs();
      check_cuda(cudaDeviceSynchronize(), "poison");
      check_cuda(cudaGraphLaunch(exec, stream.get()), "graph launch");
      stream.synchronize();
      for (std::size_t i = 0; i < layers.size(); ++i) {
        devices[i]->download_outputs();
        expect_matches_reference(layers[i], label + " layer " + std::to_string(i + 1));
      }
      EXPECT_TRUE(outputs_untouched(first, first_device)) << label << ": the prepared layer was written";
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);

      run->enqueue(stream.get());
      stream.synchronize();
      first_device.download_outputs();
      expect_matches_reference(first, label + " prepared layer");
    }
  }
}

TEST(LayerTensorsGpu, MisalignedLayerTensorsAreRefusedByName) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const auto runtimes = cuda_runtimes();
  if (runtimes.empty()) GTEST_SKIP() << "no CUDA backend available";
  struct Misplaced {
    const char* field;
    void (*shift)(LayerTensors&);
  };
  const Misplaced cases[] = {
      {"layer.q", [](LayerTensors& l) { l.q = static_cast<const char*>(l.q) + 2; }},
      {"layer.kv_pool", [](LayerTensors& l) { l.kv_pool = static_cast<const char*>(l.kv_pool) + 2; }},
      {"layer.out", [](LayerTensors& l) { l.out = static_cast<char*>(l.out) + 2; }},
  };
  for (const auto& runtime : runtimes) {
    const std::string backend = runtime->options().forced_backend;
    SyntheticBatch first(layer_spec(DType::bf16));
    SyntheticBatch second = another_layer(first, 1);
    DeviceBatch first_device(first);
    DeviceBatch second_device(second);
    TestStream stream;
    auto run = runtime->prepare(first_device.problem(), {}, stream.get());
    second_device.poison_outputs();
    for (const Misplaced& c : cases) {
      LayerTensors layer = layer_tensors(second_device.problem());
      c.shift(layer);
      try {
        run->enqueue(layer, stream.get());
        ADD_FAILURE() << backend << " " << c.field << ": a misaligned tensor was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(e.field(), c.field) << backend << ": " << e.what();
      }
    }
    stream.synchronize();
    EXPECT_TRUE(outputs_untouched(second, second_device)) << backend << ": ran before refusing";
  }
}

TEST(PreparedRunGpu, PrepareOnACapturingStreamIsRefused) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const auto runtimes = cuda_runtimes();
  if (runtimes.empty()) GTEST_SKIP() << "no CUDA backend available";
  for (const auto& runtime : runtimes) {
    const std::string backend = runtime->options().forced_backend;
    SyntheticBatch host(layer_spec(DType::bf16));
    DeviceBatch device(host);
    const Problem problem = device.problem();
    DeviceBuffer workspace(runtime->workspace_bytes(problem));
    TestStream stream;
    check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
      runtime->prepare(problem, {workspace.data(), workspace.bytes()}, stream.get());
      ADD_FAILURE() << backend << ": prepare on a capturing stream was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "stream") << backend << ": " << e.what();
    }
    cudaGraph_t graph = nullptr;
    // The refusal left the capture valid and empty.
    check_cuda(cudaStreamEndCapture(stream.get(), &graph), "end capture");
    std::size_t nodes = 1;
    check_cuda(cudaGraphGetNodes(graph, nullptr, &nodes), "graph nodes");
    EXPECT_EQ(nodes, 0u) << backend;
    cudaGraphDestroy(graph);

    device.poison_outputs();
    auto run = runtime->prepare(problem, {workspace.data(), workspace.bytes()}, stream.get());
    run->enqueue(stream.get());
    stream.synchronize();
    device.download_outputs();
    expect_matches_reference(host, backend + " after the refused capture");
  }
}

// An engine that handled a failed allocation without reading the error back
// leaves it as the thread's last error. Enqueue must neither blame its own
// launches for it (cudaGetLastError after a <<<>>> launch did, throwing with
// the attention queued and the split combine not) nor clear it.
TEST(PreparedRunGpu, EnqueueLeavesTheCallersUnreadErrorAlone) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const auto runtimes = cuda_runtimes();
  if (runtimes.empty()) GTEST_SKIP() << "no CUDA backend available";
  for (const auto& runtime : runtimes) {
    const std::string backend = runtime->options().forced_backend;
    SyntheticBatch host(layer_spec(DType::bf16));
    DeviceBatch device(host);
    TestStream stream;
    DeviceBuffer workspace(runtime->workspace_bytes(device.problem()));
    auto run = runtime->prepare(device.problem(), {workspace.data(), workspace.bytes()}, stream.get());
    stream.synchronize();
    device.poison_outputs();
    void* too_big = nullptr;
    ASSERT_EQ(cudaMalloc(&too_big, std::size_t{1} << 60), cudaErrorMemoryAllocation) << backend;
    try {
      run->enqueue(stream.get());
    } catch (const std::exception& e) {
      ADD_FAILURE() << backend << ": enqueue blamed itself for the caller's error: " << e.what();
    }
    EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation) << backend << ": the caller's error was cleared";
    stream.synchronize();
    device.download_outputs();
    expect_matches_reference(host, backend + " beside an unread error");
  }
}

// An engine with a thread per stream captures one stream's step while
// another thread prepares, refreshes and drops runs on its own stream; one
// thread may do the same beside its own capture. In
// cudaStreamCaptureModeGlobal (CUDA's default) CUDA forbids every thread the
// calls those make (cudaMalloc and cudaFree of a run's own workspace,
// cudaMallocHost and cudaEventQuery of the staging pool): each fails and
// invalidates the capture, unless the library relaxes its thread's mode for
// them. The capture must stay valid throughout, and its graph and the run
// beside it must match the reference.
TEST(PreparedRunGpu, PreparingBesideAGlobalCaptureLeavesItValid) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const auto runtimes = cuda_runtimes();
  if (runtimes.empty()) GTEST_SKIP() << "no CUDA backend available";
  for (const auto& runtime : runtimes) {
    for (const bool other_thread : {false, true}) {
      const std::string label =
          runtime->options().forced_backend + (other_thread ? ", from another thread" : ", from the capturing thread");
      SyntheticBatch captured(layer_spec(DType::bf16));
      DeviceBatch captured_device(captured);
      BatchSpec beside_spec = layer_spec(DType::fp8_e4m3);
      beside_spec.seed = 12;
      SyntheticBatch beside(beside_spec);
      DeviceBatch beside_device(beside);
      TestStream capturing, other;
      auto run = runtime->prepare(captured_device.problem(), {}, capturing.get());
      // A dropped run's staging goes back to the pool with its copy done, so
      // the prepares below query its event before reusing it.
      runtime->prepare(beside_device.problem(), {}, other.get()).reset();
      captured_device.poison_outputs();
      beside_device.poison_outputs();
      check_cuda(cudaDeviceSynchronize(), "uploads and poison");

      check_cuda(cudaStreamBeginCapture(capturing.get(), cudaStreamCaptureModeGlobal), "begin capture");
      run->enqueue(capturing.get());
      const auto expect_capturing = [&](const std::string& after) {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        check_cuda(cudaStreamIsCapturing(capturing.get(), &status), "capture status");
        EXPECT_EQ(status, cudaStreamCaptureStatusActive) << label << ": the capture ended or broke after " << after;
      };
      std::unique_ptr<PreparedRun> beside_run;
      const auto work_beside = [&] {
        try {
          // Own workspaces: cudaMalloc in prepare, cudaFree when dropped.
          runtime->prepare(beside_device.problem(), {}, other.get()).reset();
          expect_capturing("a run prepared and dropped");
          beside_run = runtime->prepare(beside_device.problem(), {}, other.get());
          expect_capturing("a run prepared");
          EXPECT_TRUE(runtime->plan_step(beside_device.problem()).refresh(*beside_run, other.get())) << label;
          expect_capturing("a refresh");
          beside_run->enqueue(other.get());
        } catch (const std::exception& e) {
          ADD_FAILURE() << label << ": " << e.what();
        }
      };
      if (other_thread) {
        std::thread(work_beside).join();
      } else {
        work_beside();
      }
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(capturing.get(), &graph);
      cudaGetLastError();
      ASSERT_EQ(ended, cudaSuccess) << label << ": " << cudaGetErrorString(ended);
      cudaGraphExec_t exec = nullptr;
      check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      cudaGraphDestroy(graph);
      check_cuda(cudaGraphLaunch(exec, capturing.get()), "graph launch");
      check_cuda(cudaDeviceSynchronize(), "graph and the run beside it");
      cudaGraphExecDestroy(exec);
      captured_device.download_outputs();
      expect_matches_reference(captured, label + ": the captured run");
      ASSERT_TRUE(beside_run) << label;
      beside_device.download_outputs();
      expect_matches_reference(beside, label + ": the run beside the capture");
    }
  }
}

// An engine's graph across steps: captured from a run of one step, replayed
// for the next after StepPlan::refresh rewrote the run's metadata (every
// generation a token longer within its KV tiles and pages, other values
// and another page table). Without the refresh the replay would read the
// next step's pool through the old page table. Then a step whose long
// request was replaced by a slightly shorter one, whose own plan has other
// split counts (on 132 SMs, an H200's, the tensor-core plan has 128 items
// against the prepared 129, and TensorcorePlan.KeptSplitCounts* checks the
// same shapes on the host): the run keeps its counts (the same grid) and
// the same graph replays it. A step whose launches differ beyond that (a much longer
// request: another page-table width) is refused.
TEST(PreparedRunGpu, ARefreshedRunReplaysTheNextStepsFromItsGraph) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const auto runtimes = cuda_runtimes();
  if (runtimes.empty()) GTEST_SKIP() << "no CUDA backend available";
  for (const auto& runtime : runtimes) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      const std::string label = runtime->options().forced_backend + " " + std::string(to_string(kv));
      BatchSpec spec = layer_spec(kv);
      spec.kv_len = {20001, 130, 301};
      spec.page_table_stride = 313;  // an engine's fixed width: 20001 tokens of 64-token pages
      SyntheticBatch step(spec);
      DeviceBatch step_device(step);
      std::vector<SyntheticBatch> next_steps;
      for (const std::vector<std::int32_t>& kv_len :
           {std::vector<std::int32_t>{20002, 131, 302}, std::vector<std::int32_t>{19969, 132, 303}}) {
        BatchSpec next_spec = spec;
        next_spec.kv_len = kv_len;
        next_spec.seed += next_steps.size() + 1;
        next_steps.emplace_back(next_spec);
      }
      std::vector<std::unique_ptr<DeviceBatch>> next_devices;
      for (SyntheticBatch& next : next_steps) next_devices.push_back(std::make_unique<DeviceBatch>(next));
      TestStream stream;
      const Problem prepared = step_device.problem();
      DeviceBuffer workspace(runtime->workspace_bytes(prepared));
      auto run = runtime->prepare(prepared, {workspace.data(), workspace.bytes()}, stream.get());
      stream.synchronize();

      // A graph per step's tensors, all captured before any refresh: each
      // replays a step whose metadata only the refresh put in place.
      std::vector<cudaGraphExec_t> graphs;
      for (auto& next_device : next_devices) {
        cudaGraph_t graph = nullptr;
        check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
        run->enqueue(layer_tensors(next_device->problem()), stream.get());
        check_cuda(cudaStreamEndCapture(stream.get(), &graph), "end capture");
        cudaGraphExec_t exec = nullptr;
        check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
        cudaGraphDestroy(graph);
        graphs.push_back(exec);
      }
      for (std::size_t i = 0; i < next_steps.size(); ++i) {
        const std::string at = label + " step " + std::to_string(i + 1);
        ASSERT_TRUE(runtime->plan_step(next_devices[i]->problem()).refresh(*run, stream.get())) << at;
        next_devices[i]->poison_outputs();
        check_cuda(cudaDeviceSynchronize(), "poison");
        check_cuda(cudaGraphLaunch(graphs[i], stream.get()), "graph launch");
        stream.synchronize();
        next_devices[i]->download_outputs();
        expect_matches_reference(next_steps[i], at + " from the graph");
      }
      for (cudaGraphExec_t exec : graphs) cudaGraphExecDestroy(exec);

      BatchSpec far_spec = spec;
      far_spec.kv_len = {60000, 130, 301};
      SyntheticBatch far(far_spec);
      DeviceBatch far_device(far);
      EXPECT_FALSE(runtime->plan_step(far_device.problem()).refresh(*run, stream.get())) << label;
    }
  }
}

}  // namespace
}  // namespace helixmla::testing

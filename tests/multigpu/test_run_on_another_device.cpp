// A run whose batch lives on GPU 1, driven from a thread whose current
// device is GPU 0, as an engine that drives several GPUs from one thread
// drives it: prepare, enqueue, a captured enqueue, a refresh and the release
// of a run's own workspace work on GPU 1 and leave GPU 0 current; a stream
// of GPU 0 is refused by name, before any copy is queued on it, at prepare
// and at refresh.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/generic_backend.hpp"
#include "cuda/tensorcore_backend.hpp"
#include "device_batch.hpp"
#include "helixmla/error.hpp"
#include "helixmla/runtime.hpp"
#include "support/gpu_skip.hpp"
#include "support/host_checks.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {
namespace {

constexpr int kRunDevice = 1;
constexpr int kCallerDevice = 0;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
}

int current_device() {
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  return device;
}

// A non-blocking stream of `device`, made with that device current.
struct DeviceStream {
  explicit DeviceStream(int device) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~DeviceStream() { cudaStreamDestroy(stream); }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  cudaStream_t stream = nullptr;
};

BatchSpec spec_of(std::uint64_t seed, std::vector<std::int32_t> kv_len) {
  BatchSpec spec;
  spec.heads = 16;
  spec.generations = static_cast<std::int32_t>(kv_len.size());
  spec.q_len = 1;
  spec.kv_len = std::move(kv_len);
  spec.page_size = 64;
  spec.page_table_stride = 40;
  spec.seed = seed;
  return spec;
}

TEST(RunOnAnotherDevice, RunsOnItsGpuAndLeavesTheCallersCurrent) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(2);
  Environment env = Environment::detect();
  env.device = kRunDevice;
  bool ran = false;
  for (const BackendPtr& backend : {cuda::make_tensorcore_backend(), cuda::make_generic_backend()}) {
    if (!backend->available(env)) continue;
    ran = true;
    const std::string label(backend->name());
    RuntimeOptions options;
    options.forced_backend = label;
    options.environment = env;
    const Runtime runtime(options);

    SyntheticBatch step(spec_of(5, {2000, 300, 9}));
    SyntheticBatch next(spec_of(6, {2001, 301, 10}));
    DeviceBatch step_device(step, kRunDevice);
    DeviceBatch next_device(next, kRunDevice);
    DeviceStream own(kRunDevice), foreign(kCallerDevice);
    check(cudaSetDevice(kRunDevice), "set device");
    DeviceBuffer workspace(runtime.workspace_bytes(step_device.problem()));

    check(cudaSetDevice(kCallerDevice), "set device");
    try {
      runtime.prepare(step_device.problem(), {workspace.data(), workspace.bytes()}, foreign.stream);
      ADD_FAILURE() << label << ": prepare took a stream of GPU " << kCallerDevice;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "stream") << label << ": " << e.what();
    }
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after the refused prepare";

    auto run = runtime.prepare(step_device.problem(), {workspace.data(), workspace.bytes()}, own.stream);
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after prepare";
    run->enqueue(own.stream);
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after enqueue";
    check(cudaStreamSynchronize(own.stream), "run");
    check(cudaSetDevice(kRunDevice), "set device");
    step_device.download_outputs();
    expect_matches_naive(step, label + ": enqueued");

    // A graph of the run's enqueue on the next step's tensors, replayed once
    // a refresh (refused on GPU 0's stream first) put its metadata in place.
    cudaGraph_t graph = nullptr;
    check(cudaSetDevice(kCallerDevice), "set device");
    check(cudaStreamBeginCapture(own.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    run->enqueue(layer_tensors(next_device.problem()), own.stream);
    check(cudaStreamEndCapture(own.stream, &graph), "end capture");
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after the captured enqueue";
    const StepPlan next_step = runtime.plan_step(next_device.problem());
    try {
      next_step.refresh(*run, foreign.stream);
      ADD_FAILURE() << label << ": refresh took a stream of GPU " << kCallerDevice;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "stream") << label << ": " << e.what();
    }
    ASSERT_TRUE(next_step.refresh(*run, own.stream)) << label;
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after refresh";
    check(cudaSetDevice(kRunDevice), "set device");
    next_device.poison_outputs();
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaGraphDestroy(graph);
    check(cudaGraphLaunch(exec, own.stream), "graph launch");
    check(cudaStreamSynchronize(own.stream), "graph");
    cudaGraphExecDestroy(exec);
    next_device.download_outputs();
    expect_matches_naive(next, label + ": replayed after the refresh");

    check(cudaSetDevice(kCallerDevice), "set device");
    run.reset();
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after the run's release";

    // A run with a workspace of its own, allocated on GPU 1, is freed there
    // when released from GPU 0: no error left behind, GPU 0 still current.
    auto owning = runtime.prepare(step_device.problem(), {}, own.stream);
    owning->enqueue(own.stream);
    check(cudaStreamSynchronize(own.stream), "run with its own workspace");
    check(cudaGetLastError(), "before the release");
    owning.reset();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << label << ": freeing the run's own workspace failed";
    EXPECT_EQ(current_device(), kCallerDevice) << label << " after releasing the run with its own workspace";
  }
  if (!ran) GTEST_SKIP() << "no CUDA backend available on GPU " << kRunDevice;
}

}  // namespace
}  // namespace helixmla::testing

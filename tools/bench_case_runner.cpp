#if defined(HELIXMLA_WITH_CUDA)

#include "bench_case_runner.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "commands.hpp"
#include "compare.hpp"
#include "device_batch.hpp"
#include "gather_read.hpp"
#include "helixmla/error.hpp"

namespace helixmla::tools {

namespace {

constexpr std::size_t kMaxRotationBytes = std::size_t{48} << 30;
// Enough copies for tune's smallest cells (one 4K-token request, ~2-5 MB
// each) to exceed 3x the L2 as DESIGN §7 asks; each copy is a prepared run
// and a captured graph, cheap at that size.
constexpr int kMaxRotations = 128;
constexpr std::int32_t kCheckedRequests = 2;

}  // namespace

double CaseRunner::time_gather(const std::vector<std::unique_ptr<testing::DeviceSyntheticBatch>>& batches,
                               int iterations) {
  std::vector<testing::DeviceBuffer> rows;
  std::vector<std::int64_t> counts;
  for (const auto& batch : batches) {
    const std::vector<std::int32_t> host = testing::gathered_rows(batch->problem());
    rows.emplace_back(host.size() * sizeof(std::int32_t));
    rows.back().upload(host.data(), rows.back().bytes());
    counts.push_back(static_cast<std::int64_t>(host.size()));
  }
  const Problem first = batches.front()->problem();
  const int row_bytes = static_cast<int>(first.dims.head_dim() * dtype_size(first.kv.dtype));
  testing::DeviceBuffer sink(16);
  return median_enqueue_us(stream_, 5, iterations, [&](int i) {
    const std::size_t k = static_cast<std::size_t>(i) % batches.size();
    testing::enqueue_gather_read(batches[k]->problem().kv.pool, static_cast<const std::int32_t*>(rows[k].data()),
                                 counts[k], row_bytes, sm_count_, sink.data(), stream_);
  });
}

HostTiming CaseRunner::time_host(const Runtime& runtime,
                                 const std::vector<std::unique_ptr<testing::DeviceSyntheticBatch>>& batches,
                                 PreparedRun& run) {
  constexpr int kWarmup = 3;
  constexpr int kRepeats = 21;
  const Problem problem = batches.front()->problem();
  testing::DeviceBuffer workspace(runtime.workspace_bytes(problem));
  // The rotated batches stand in for layers: the same geometry, other
  // tensors (read through the first batch's page table, whose ids every
  // pool of the case holds; rows another batch's own table leaves unseen
  // hold NaN, which the host's times here do not notice).
  std::vector<LayerTensors> layers;
  for (const auto& batch : batches) layers.push_back(layer_tensors(batch->problem()));
  std::vector<double> prepare_us, enqueue_us;
  for (int i = 0; i < kWarmup + kRepeats; ++i) {
    cuda_ok(cudaStreamSynchronize(stream_), "host timing");
    auto begin = std::chrono::steady_clock::now();
    auto prepared = runtime.prepare(problem, {workspace.data(), workspace.bytes()}, stream_);
    const double prepare = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count();
    cuda_ok(cudaStreamSynchronize(stream_), "host timing");
    begin = std::chrono::steady_clock::now();
    run.enqueue(layers[static_cast<std::size_t>(i) % layers.size()], stream_);
    const double enqueue = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count();
    if (i >= kWarmup) {
      prepare_us.push_back(prepare);
      enqueue_us.push_back(enqueue);
    }
  }
  // DeepSeek-V3's 61 layers: the launch queue holds them all.
  constexpr int kStepLayers = 61;
  std::vector<double> step_us;
  for (int i = 0; i < kWarmup + kRepeats; ++i) {
    cuda_ok(cudaStreamSynchronize(stream_), "host timing");
    const auto begin = std::chrono::steady_clock::now();
    for (int l = 0; l < kStepLayers; ++l) run.enqueue(layers[static_cast<std::size_t>(l) % layers.size()], stream_);
    const double step = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count();
    if (i >= kWarmup) step_us.push_back(step / kStepLayers);
  }
  cuda_ok(cudaStreamSynchronize(stream_), "host timing");
  const auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(prepare_us), median(enqueue_us), median(step_us)};
}

CaseRunner::CaseRunner(std::string forced_backend)
    : forced_(std::move(forced_backend)), env_(Environment::detect()) {
  const Environment& env = env_;
  require_cuda_gpu(env, "the benchmark runner");
  cuda_ok(cudaSetDevice(env.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, env.device), "cudaGetDeviceProperties");
  device_name_ = prop.name;
  l2_bytes_ = static_cast<std::size_t>(prop.l2CacheSize);
  sm_count_ = prop.multiProcessorCount;
  cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

CaseRunner::~CaseRunner() {
  if (stream_) cudaStreamDestroy(stream_);
}

const Runtime& CaseRunner::runtime_for(const std::string& backend) {
  auto& slot = runtimes_[backend];
  if (!slot) {
    RuntimeOptions options;
    options.forced_backend = backend;
    options.environment = env_;
    slot = std::make_unique<Runtime>(options);
  }
  return *slot;
}

CaseResult CaseRunner::run(const BenchCase& c, const CaseOptions& options) {
  const Runtime& runtime = runtime_for(options.backend.empty() ? forced_ : options.backend);
  const int iterations = options.iterations;
  std::vector<std::unique_ptr<testing::DeviceSyntheticBatch>> batches;
  batches.push_back(std::make_unique<testing::DeviceSyntheticBatch>(batch_spec_of(c, 1), env_.device));
  const std::size_t one = batches.front()->device_bytes();
  const std::size_t wanted = std::clamp<std::size_t>((3 * l2_bytes_ + one - 1) / std::max<std::size_t>(one, 1), 1,
                                                     std::min<std::size_t>(kMaxRotations, kMaxRotationBytes / one));
  while (batches.size() < wanted) {
    batches.push_back(std::make_unique<testing::DeviceSyntheticBatch>(batch_spec_of(c, 1 + batches.size()),
                                                                      env_.device));
  }

  CaseResult result;
  std::vector<testing::DeviceBuffer> workspaces;
  std::vector<std::unique_ptr<PreparedRun>> prepared;
  std::vector<PreparedRun*> runs;
  for (auto& batch : batches) {
    const Problem problem = batch->problem();
    const StepPlan step = runtime.plan_step(problem);
    if (result.backend.empty()) result.backend = step.selection().generation->choice;
    workspaces.emplace_back(step.workspace_bytes());
    prepared.push_back(step.prepare({workspaces.back().data(), workspaces.back().bytes()}, stream_));
    runs.push_back(prepared.back().get());
  }
  cuda_ok(cudaStreamSynchronize(stream_), "upload metadata");
  result.timing = time_runs(runs, stream_, 5, iterations, options.graphs);
  if (options.gather) result.gather_us = time_gather(batches, iterations);
  if (options.host) result.host = time_host(runtime, batches, *runs.front());
  if (options.verify) {
    // The timed runs overwrote the outputs; rerun the first batch once more
    // after poisoning so that only this run's writes are checked.
    batches.front()->poison_outputs(stream_);
    runs.front()->enqueue(stream_);
    cuda_ok(cudaStreamSynchronize(stream_), "verification run");
    result.rel_l2_err = testing::first_requests_rel_l2(*batches.front(), kCheckedRequests);
    result.correct = result.rel_l2_err <= testing::output_tolerance(c.kv_dtype);
  }
  return result;
}

}  // namespace helixmla::tools

#endif

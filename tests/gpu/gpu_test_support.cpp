#include "gpu/gpu_test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "helixmla/error.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/validate.hpp"

namespace helixmla::testing {

namespace {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

TestStream::TestStream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
TestStream::~TestStream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void TestStream::synchronize() const { check_cuda(cudaStreamSynchronize(stream_), "stream synchronize"); }

int run_backend_phases(const Backend& backend, const Problem& device_problem, cudaStream_t stream) {
  validate(device_problem);
  const PhasePlan plan = plan_phases(device_problem);
  std::vector<std::unique_ptr<PreparedRun>> runs;
  for (const std::optional<Phase>* phase : {&plan.context, &plan.generation}) {
    if (!phase->has_value()) continue;
    const PhaseShape shape = shape_of(**phase, device_problem);
    if (const Verdict verdict = backend.check(shape); !verdict) {
      throw std::runtime_error(std::string(backend.name()) + " check refused " + describe(shape) + ": " +
                               verdict.reason);
    }
    if (const Verdict verdict = backend.catalog().can_implement(shape, Environment{}); !verdict) {
      throw std::runtime_error(std::string(backend.name()) + " catalog refused " + describe(shape) + ": " +
                               verdict.reason);
    }
    runs.push_back(backend.prepare((*phase)->problem, Workspace{}, stream));
    runs.back()->enqueue(stream);
  }
  check_cuda(cudaStreamSynchronize(stream), "run synchronize");
  return static_cast<int>(runs.size());
}


}  // namespace helixmla::testing

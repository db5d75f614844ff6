// Helpers shared by the GPU tests: a stream, running a backend over every
// phase of a batch, and the comparison of a run with the float64 reference
// that both backends' parity tests make. The reference and the metrics
// themselves live in testing/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "helixmla/backend.hpp"
#include "compare.hpp"
#include "parallel_naive_attention.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {

// Throws RuntimeFailure naming `what` unless `status` is cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

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

struct ClaimedPhase {
  Problem problem;  // part-relative view of the batch (plan_phases)
  PhaseShape shape;
  KernelVariant kernel;  // the catalog's choice
};

// Validates the device problem, splits it with plan_phases and checks that
// `backend` is capable of each phase, by its check() and by its catalog for
// `env`; throws otherwise.
std::vector<ClaimedPhase> claim_phases(const Backend& backend, const Problem& device_problem, const Environment& env);

// Claims every phase (with a default Environment), prepares and enqueues
// each on `stream` and waits. Returns the number of phases run.
int run_backend_phases(const Backend& backend, const Problem& device_problem, cudaStream_t stream);

// Compares the outputs downloaded into `host` with the float64 attention of
// its batch under `helix` (the Helix settings the run had): relative L2 within
// 1e-2, 3e-2 for fp8 KV, and the statistics, when the batch has them, within
// 1e-3.
void expect_matches_reference(SyntheticBatch& host, const std::string& label, const HelixSettings& helix = {});

// The same comparison against a reference computed beforehand (of the
// batch's problem without Helix settings), for a batch run many times.
void expect_matches(SyntheticBatch& host, const NaiveResult& reference, const std::string& label);

// Adds spare pages until the pool holds at least `bytes`. The shuffled page
// order then scatters the batch's pages over the whole pool, on both sides
// of 32-bit byte offsets when `bytes` passes 4 GiB, as in an engine's cache.
void grow_pool_past(BatchSpec& spec, std::int64_t bytes);

// KV rows the batch's requests read whose first byte lies at or past
// `offset` bytes into the pool.
std::int64_t rows_read_past(const SyntheticBatch& batch, std::int64_t offset);

// NaN input: a NaN code in value 3 (a key and a value element) of request
// 0's KV row at `position`. The unsplit softmax then gives NaN in every
// output of the request and in every row's l.
void put_nan_in_kv(SyntheticBatch& host, std::int32_t position);
// Fills a run's outputs and stats with 0x3c bytes (finite in every dtype), so
// that an output left unwritten cannot pass for the NaN a test expects.
void poison_outputs_finite(const Problem& device_problem, const SyntheticBatch& host);
// Expects every output value and l of request 0's rows (its heads x q_len
// rows come first) in the downloaded `host` to be NaN, as put_nan_in_kv must
// make them.
void expect_first_request_nan(const SyntheticBatch& host, const std::string& label);

}  // namespace helixmla::testing

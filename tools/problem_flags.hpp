// The flags that describe a synthetic batch, shared by `run`, `explain` and
// `trace`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "helixmla/backend.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::tools {

struct ProblemFlags {
  std::int32_t heads = 128;
  std::int32_t q_len = 1;
  std::int32_t batch = 2;                     // generation requests
  std::vector<std::int32_t> kv_len = {2048};  // one value, or one per generation (cycled)
  std::int32_t page_size = 64;
  std::string kv_dtype = "bf16";
  std::int32_t contexts = 0;
  std::int32_t context_len = 64;
  std::uint64_t seed = 1;
  std::string backend;                        // forced backend; empty = selector
  bool stats = false;
};

void add_problem_flags(CLI::App& app, ProblemFlags& flags);

// Empty when `name` is a KV-cache element type (parse_kv_dtype), else what
// is wrong with it: a CLI11 validator, and the message for a suite cell.
std::string kv_dtype_complaint(const std::string& name);

// An unknown --backend name is a bad flag value (CLI::ValidationError, exit 2);
// a known backend that cannot run the batch is a failed run instead.
// `owner` names where the backends come from ("this build", "profile trtllm").
void require_known_backend(const std::string& name, const std::vector<BackendPtr>& backends,
                           const std::string& owner);
// Empty when the synthetic batch `spec`, `layers` times over (`run --layers`:
// every layer its own tensors and page table), fits the host memory helixmla
// allows it (16 GiB in all, 1 GiB of page table), else what it would need.
std::string host_footprint_complaint(const testing::BatchSpec& spec, int layers = 1);
// Empty when every one of `lengths` KV lengths, cycled over `batch` requests,
// is some request's; else why not, naming the batch as `batch_name` does.
std::string unused_lengths_complaint(std::size_t lengths, std::int32_t batch, const std::string& batch_name);
// Throws CLI::ValidationError when `command` was given --kv-len or --q-len
// for a batch with no generation to take it, or --context-len for one with
// no context.
void refuse_lengths_without_requests(const CLI::App& command, const ProblemFlags& flags);
// Throws CLI::ValidationError naming the flag when a value is out of range.
testing::BatchSpec to_batch_spec(const ProblemFlags& flags, bool allocate_tensors = true);
// The phase shapes of the batch the flags describe, as the selector would see
// them on `env` (tensors on the device when env has a GPU and a CUDA backend
// and the backend is not forced to "cpu"),
// with Helix on when cp > 1 (which implies a float32 stats buffer). Throws
// InvalidArgument for a batch the library's validate() refuses.
std::vector<PhaseShape> phase_shapes(const ProblemFlags& flags, const Environment& env, int cp);

}  // namespace helixmla::tools

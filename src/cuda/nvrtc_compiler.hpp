// CUDA C++ source text to a cubin with NVRTC. Needs no GPU: the target
// architecture is named, not detected, so tests can compile on a machine
// without one.
#pragma once

#include <string>
#include <vector>

#include "cuda/jit_cache.hpp"

namespace helixmla::cuda {

struct NvrtcProgram {
  std::string name;    // shown in compile logs
  std::string source;  // self-contained: the kernels helixmla compiles include no headers
  std::string arch;    // e.g. "sm_90a"
  std::vector<std::string> options;  // besides the architecture
};

// "major.minor" of the NVRTC library loaded, or empty when it cannot answer.
std::string nvrtc_version();

// Throws RuntimeFailure with the compiler log when compilation fails.
std::vector<char> nvrtc_compile_cubin(const NvrtcProgram& program);

// What a cached cubin must match: the source text (by digest), the options,
// the architecture and the NVRTC version.
std::string nvrtc_cache_key(const NvrtcProgram& program);

// The cubin from `cache` when its entry is current, else compiled and stored.
// `compiled` (when given) says whether NVRTC ran.
std::vector<char> cached_cubin(const NvrtcProgram& program, const std::string& entry_name,
                               const JitCache& cache, bool* compiled = nullptr);

}  // namespace helixmla::cuda

#include "cuda/nvrtc_compiler.hpp"

#include <nvrtc.h>

#include <memory>
#include <string_view>

#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

void check_nvrtc(nvrtcResult status, const char* what) {
  if (status != NVRTC_SUCCESS) {
    throw RuntimeFailure(std::string("NVRTC ") + what + " failed: " + nvrtcGetErrorString(status));
  }
}

struct ProgramDeleter {
  void operator()(nvrtcProgram* program) const {
    nvrtcDestroyProgram(program);
    delete program;
  }
};

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return {};
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<char> nvrtc_compile_cubin(const NvrtcProgram& program) {
  std::unique_ptr<nvrtcProgram, ProgramDeleter> handle(new nvrtcProgram{});
  check_nvrtc(nvrtcCreateProgram(handle.get(), program.source.c_str(), program.name.c_str(), 0,
                                 nullptr, nullptr),
              "program creation");
  std::vector<std::string> options = program.options;
  options.push_back("--gpu-architecture=" + program.arch);
  std::vector<const char*> argv;
  for (const std::string& option : options) argv.push_back(option.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(*handle, static_cast<int>(argv.size()), argv.data());
  if (compiled != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(*handle, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      nvrtcGetProgramLog(*handle, log.data());
    }
    throw RuntimeFailure("NVRTC could not compile " + program.name + " for " + program.arch +
                         ": " + nvrtcGetErrorString(compiled) + "\n" + log);
  }
  std::size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(*handle, &cubin_size), "cubin size query");
  std::vector<char> cubin(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(*handle, cubin.data()), "cubin retrieval");
  return cubin;
}

std::string nvrtc_cache_key(const NvrtcProgram& program) {
  std::string key = "source=" + hex64(fnv1a64(program.source)) +
                    ";bytes=" + std::to_string(program.source.size()) + ";arch=" + program.arch +
                    ";nvrtc=" + nvrtc_version() + ";options=";
  for (const std::string& option : program.options) key += option + " ";
  return key;
}

std::vector<char> cached_cubin(const NvrtcProgram& program, const std::string& entry_name,
                               const JitCache& cache, bool* compiled) {
  const std::string key = nvrtc_cache_key(program);
  if (auto cubin = cache.load(entry_name, key)) {
    if (compiled) *compiled = false;
    return *std::move(cubin);
  }
  std::vector<char> cubin = nvrtc_compile_cubin(program);
  try {
    cache.store(entry_name, key, cubin);
  } catch (const RuntimeFailure&) {
    // A read-only or full cache costs a compile per process, not the run.
  }
  if (compiled) *compiled = true;
  return cubin;
}

}  // namespace helixmla::cuda

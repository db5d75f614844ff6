#include "helixmla/environment.hpp"

#include <cstdlib>
#include <string>

#include "core/env_integer.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>
#include <nvrtc.h>
#endif

namespace helixmla {

std::string_view to_string(Arch arch) {
  switch (arch) {
    case Arch::none: return "none";
    case Arch::sm80: return "sm80";
    case Arch::sm86: return "sm86";
    case Arch::sm89: return "sm89";
    case Arch::sm90: return "sm90";
    case Arch::sm100: return "sm100";
    case Arch::sm103: return "sm103";
    case Arch::sm120: return "sm120";
  }
  return "unknown";
}

std::string to_string(std::span<const Arch> archs) {
  std::string text;
  for (Arch a : archs) text += (text.empty() ? "" : ", ") + std::string(to_string(a));
  return text;
}

// The names to_string gives, and NVIDIA's spellings of the same: the bare
// number ("90"), "sm_90", and a feature suffix ("sm90a", "sm_100f"). Nothing
// looser: reading the digits alone took "xyz90abc" for sm90.
std::optional<Arch> parse_arch(std::string_view name) {
  if (name == "cpu") return Arch::none;
  std::string_view number = name;
  if (number.starts_with("sm_")) {
    number.remove_prefix(3);
  } else if (number.starts_with("sm")) {
    number.remove_prefix(2);
  }
  if (number.ends_with('a') || number.ends_with('f')) number.remove_suffix(1);
  for (Arch arch : kAllArchs) {
    if (to_string(arch) == name || (arch != Arch::none && to_string(arch).substr(2) == number)) return arch;
  }
  return std::nullopt;
}

Arch arch_from_compute_capability(int major, int minor) {
  const int cc = major * 10 + minor;
  if (cc >= 120) return Arch::sm120;
  if (cc >= 103) return Arch::sm103;
  if (cc >= 100) return Arch::sm100;
  if (cc >= 90) return Arch::sm90;
  if (cc >= 89) return Arch::sm89;
  if (cc >= 86) return Arch::sm86;
  if (cc >= 80) return Arch::sm80;
  return Arch::none;  // older GPUs are below every CUDA backend's floor
}

Environment Environment::detect() {
  Environment env;
  env.built_backends.insert("cpu");
  // Read even where there is no device to choose (no GPU, a CPU-only
  // build), so a malformed value is reported instead of silently unused.
  const char* chosen = std::getenv("HELIXMLA_DEVICE");
  if (chosen != nullptr && *chosen == '\0') chosen = nullptr;
  if (chosen != nullptr) parse_env_integer("HELIXMLA_DEVICE", chosen, 0);
#if defined(HELIXMLA_WITH_CUDA)
  env.built_backends.insert("cuda_generic");
  env.built_backends.insert("cuda_tensorcore");
  int major = 0, minor = 0;
  env.nvrtc = nvrtcVersion(&major, &minor) == NVRTC_SUCCESS;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // no driver or no GPU: a CPU-only environment
    return env;
  }
  env.device_count = count;
  if (chosen != nullptr) env.device = static_cast<int>(parse_env_integer("HELIXMLA_DEVICE", chosen, 0, count - 1));
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, env.device) == cudaSuccess) {
    env.arch = arch_from_compute_capability(prop.major, prop.minor);
    env.sm_count = prop.multiProcessorCount;
  }
#endif
  return env;
}

}  // namespace helixmla

// What the machine offers: GPU architecture, which backends were compiled in,
// whether just-in-time compilation is possible. A plain value so tests and
// `explain --arch` can describe machines they are not running on.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>

namespace helixmla {

enum class Arch : std::uint8_t { none, sm80, sm86, sm89, sm90, sm100, sm103, sm120 };

std::string_view to_string(Arch arch);
std::string to_string(std::span<const Arch> archs);  // "sm100, sm103"
std::optional<Arch> parse_arch(std::string_view name);  // "none" or "cpu"; "sm90", "90", "sm_90", "sm_90a"
Arch arch_from_compute_capability(int major, int minor);
inline constexpr Arch kAllArchs[] = {Arch::none,  Arch::sm80,  Arch::sm86,  Arch::sm89,
                                     Arch::sm90,  Arch::sm100, Arch::sm103, Arch::sm120};

struct Environment {
  Arch arch = Arch::none;
  int device = 0;
  int device_count = 0;
  int sm_count = 0;
  bool nvrtc = false;                  // NVRTC usable for just-in-time kernels
  std::set<std::string> built_backends;  // compiled into this library

  bool has_gpu() const { return arch != Arch::none; }
  bool built(std::string_view backend) const {
    return built_backends.count(std::string(backend)) != 0;
  }
  // The machine this process runs on (device 0 unless HELIXMLA_DEVICE says
  // otherwise; InvalidArgument when it names no device of this machine, or,
  // on a machine without a GPU, where it is unused, when it is not an index).
  static Environment detect();
};

}  // namespace helixmla

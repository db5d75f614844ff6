#include "cuda/dependent_launch.hpp"

#include <map>
#include <mutex>
#include <utility>

namespace helixmla::cuda {

bool dependent_launch_supported(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, bool> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, kernel);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  cudaFuncAttributes attributes{};
  int major = 0;
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // ptxVersion is the virtual architecture the code came from: SASS JIT-built
  // from compute_80 PTX reports 80 even on an sm_90 device.
  const bool supported = major >= 9 && attributes.ptxVersion >= 90;
  known.emplace(key, supported);
  return supported;
}

}  // namespace helixmla::cuda

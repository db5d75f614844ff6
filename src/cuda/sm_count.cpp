#include "cuda/sm_count.hpp"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

namespace helixmla::cuda {

int device_sm_count(int device, int fallback) {
  static std::mutex mutex;
  static std::map<int, int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = counts.find(device); it != counts.end()) return it->second;
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
    cudaGetLastError();
    return fallback;
  }
  counts.emplace(device, count);
  return count;
}

}  // namespace helixmla::cuda

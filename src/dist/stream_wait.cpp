#include "dist/stream_wait.hpp"

#if defined(HELIXMLA_WITH_CUDA)

#include <cuda_runtime.h>

#include <vector>

namespace helixmla::dist {

void wait_for_streams(std::span<void* const> streams, const std::function<void()>& between,
                      const std::function<void(const std::string&)>& fail) {
  std::vector<bool> finished(streams.size(), false);
  std::size_t remaining = streams.size();
  while (remaining > 0) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      if (finished[i]) continue;
      const cudaError_t status = cudaStreamQuery(static_cast<cudaStream_t>(streams[i]));
      if (status == cudaSuccess) {
        finished[i] = true;
        --remaining;
      } else if (status != cudaErrorNotReady) {
        fail(std::string("a stream of the exchange failed: ") + cudaGetErrorString(status));
      }
    }
    if (remaining > 0) between();
  }
}

}  // namespace helixmla::dist

#endif

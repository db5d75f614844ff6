// Waiting for the streams of a device exchange without blocking in CUDA, so
// the exchange can check its own failure signals (NCCL's asynchronous
// errors, the peer kernels' timeout flag) and its deadline in between.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <functional>
#include <span>
#include <string>

namespace helixmla::dist {

// Polls `streams` (cudaStream_t) until each has finished its work, calling
// `between` after every round that leaves one unfinished (it checks, sleeps
// and may throw). A stream that reports an error is passed to `fail`, which
// must throw.
void wait_for_streams(std::span<void* const> streams, const std::function<void()>& between,
                      const std::function<void(const std::string&)>& fail);

}  // namespace helixmla::dist

#endif

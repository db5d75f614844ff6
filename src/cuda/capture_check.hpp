// Preparing a run uploads its metadata from pinned staging that a pool
// recycles once an event says the copy has run. Captured into a CUDA graph,
// the copy runs only at replay and the event is a captured one: the pool
// could never recycle the buffer (querying a captured event fails), and in
// global capture mode a fresh pinned allocation invalidates the capture. So
// prepare refuses a capturing stream with a clear error, as a refresh's
// upload does; a graph captures enqueue.
//
// Another stream may be capturing meanwhile: one of this thread's, or, in
// cudaStreamCaptureModeGlobal (CUDA's default), any thread's. CUDA then
// forbids this thread the calls it deems unsafe during a capture (cudaMalloc,
// cudaFree, cudaMallocHost, cudaEventQuery, module loads); each fails and
// invalidates that capture. Prepare, refresh and a run's release make such
// calls, for work that belongs to no graph (their streams are not
// capturing), so they run in relaxed mode, their device switches included
// (making a device current may create its context, one more such call).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/device_guard.hpp"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

inline void refuse_capturing_stream(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HELIXMLA_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) {
    throw InvalidArgument("stream", -1, status == cudaStreamCaptureStatusActive ? "capturing" : "capture invalidated",
                          "prepare and refresh upload metadata and cannot be captured into a CUDA graph: call "
                          "them before the capture and capture the run's enqueue");
  }
}

// A stream of another device than the run's: CUDA queues the metadata copy
// on it but refuses the event that marks the copy's end, so the upload would
// throw after its copy was queued, and the pool would hand out the staging
// buffer again while that copy may still read it. cudaStreamGetDevice came
// with CUDA 12.8; older runtimes leave the launch to report it.
inline void refuse_stream_of_other_device(cudaStream_t stream, int device) {
#if CUDART_VERSION >= 12080
  int stream_device = device;
  HELIXMLA_CUDA_CHECK(cudaStreamGetDevice(stream, &stream_device));
  if (stream_device != device) {
    throw InvalidArgument("stream", -1, "a stream of device " + std::to_string(stream_device),
                          "the batch is on device " + std::to_string(device) +
                              " (location.device): its runs prepare, refresh and launch on that device's streams");
  }
#else
  (void)stream, (void)device;
#endif
}

// Puts the calling thread in cudaStreamCaptureModeRelaxed for a scope and
// restores its mode after. Never throws, so destructors may use it: should
// the swap fail, the unsafe call it guards reports the capture itself.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept : swapped_(cudaThreadExchangeStreamCaptureMode(&previous_) == cudaSuccess) {}
  ~RelaxedCaptureMode() {
    if (swapped_) cudaThreadExchangeStreamCaptureMode(&previous_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
  bool swapped_;
};

// The scope of prepare's or a refresh's host work, which uploads a run's
// metadata on `stream`: relaxed capture mode (the device switch included),
// the run's device current, and the stream refused if it is capturing or
// belongs to another device.
class MetadataUploadScope {
 public:
  MetadataUploadScope(void* stream, int device) : guard_(device) {
    refuse_capturing_stream(static_cast<cudaStream_t>(stream));
    refuse_stream_of_other_device(static_cast<cudaStream_t>(stream), device);
  }

 private:
  RelaxedCaptureMode relaxed_;  // first in, last out: the guard switches inside it
  DeviceGuard guard_;
};

}  // namespace helixmla::cuda

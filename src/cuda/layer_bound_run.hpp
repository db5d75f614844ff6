// What the CUDA backends' prepared runs share: launch arguments built once,
// the tensors bound at each launch, a workspace (the caller's or the run's
// own) that holds the uploaded metadata. enqueue(stream) launches on the layer
// the run was prepared for; enqueue(layer) checks another layer's tensors
// (validate_layer, the backend's alignment) and launches on them.
#pragma once

#include <cstddef>

#include "cuda/run_memory.hpp"
#include "helixmla/backend.hpp"

namespace helixmla::cuda {

// The alignments a backend's kernels need of each tensor (0: none), and the
// backend's name for the message.
struct TensorAlignment {
  const char* backend = "";
  std::size_t q = 0, kv_pool = 0, out = 0, stats = 0;
};

// Whether tensors aligned as `have` meet `need`, for a backend's check.
Verdict check_alignment(const AddressAlignment& have, const TensorAlignment& need);
// Throws InvalidArgument naming `field` unless `pointer` is aligned.
void require_alignment(const char* field, const void* pointer, std::size_t alignment, const char* backend);
// Fields are named as the caller passed them: a Problem's (q, kv.pool, out,
// stats.data) or, with `as_layer`, a LayerTensors' (layer.*).
void require_tensor_alignment(const LayerTensors& layer, const TensorAlignment& need, bool as_layer);

class LayerBoundRun : public PreparedRun {
 public:
  // `phase`: the prepared phase, whose tensors' alignment prepare has checked.
  LayerBoundRun(const Problem& phase, const TensorAlignment& need)
      : prepared_(layer_tensors(phase)), need_(need), device_(phase.location.device),
        softmax_scale_(phase.softmax_scale) {}
  void enqueue(void* stream) final { launch(prepared_, stream); }
  void enqueue(const LayerTensors& layer, void* stream) final;
  void check_layer(const LayerTensors& layer) const final;
  // A `next` on the run's device with its softmax scale and aligned tensors,
  // whose metadata the backend can take (take_metadata); the step runs on
  // the run's device, refuses a capturing stream or one of another device,
  // and makes `next`'s tensors the run's own.
  Refresh plan_refresh(const Problem& next) final;

 protected:
  int device() const { return device_; }
  float softmax_scale() const { return softmax_scale_; }

  // Binds the workspace once, at prepare: the caller's `given` of `bytes`,
  // or the run's own of `bytes`. A refresh's plan must fit its capacity.
  void bind_workspace(void* given, std::size_t bytes) {
    workspace_ = static_cast<unsigned char*>(memory_.workspace(given, bytes));
    capacity_ = bytes;
  }
  unsigned char* workspace() const { return workspace_; }
  std::size_t capacity() const { return capacity_; }
  // Fills `bytes` of pinned staging memory with `fill(staging)` and enqueues
  // their copy to the workspace's start.
  template <typename Fill>
  void upload_metadata(std::size_t bytes, Fill&& fill, void* stream) {
    fill(memory_.staging(bytes));
    memory_.upload(workspace_, bytes, static_cast<cudaStream_t>(stream));
  }

 private:
  virtual void launch(const LayerTensors& layer, void* stream) const = 0;
  // The backend's part of a refresh: the upload of `next`'s metadata into
  // the run's workspace (and whatever the run keeps of its plan), or empty
  // when `next` would launch otherwise.
  virtual Refresh take_metadata(const Problem& next) = 0;

  LayerTensors prepared_;
  TensorAlignment need_;
  int device_;
  float softmax_scale_;
  unsigned char* workspace_ = nullptr;
  std::size_t capacity_ = 0;
  RunMemory memory_;
};

}  // namespace helixmla::cuda

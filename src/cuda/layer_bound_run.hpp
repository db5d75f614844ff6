// What the CUDA backends' prepared runs share: launch arguments built once,
// the tensors bound at each launch. enqueue(stream) launches on the layer
// the run was prepared for; enqueue(layer) checks another layer's tensors
// (validate_layer, the backend's alignment) and launches on them.
#pragma once

#include <cstddef>

#include "helixmla/backend.hpp"

namespace helixmla::cuda {

// The alignments a backend's kernels need of each tensor (0: none), and the
// backend's name for the message.
struct TensorAlignment {
  const char* backend = "";
  std::size_t q = 0, kv_pool = 0, out = 0, stats = 0;
};

// Throws InvalidArgument naming `field` unless `pointer` is aligned.
void require_alignment(const char* field, const void* pointer, std::size_t alignment, const char* backend);
// Fields are named as the caller passed them: a Problem's (q, kv.pool, out,
// stats.data) or, with `as_layer`, a LayerTensors' (layer.*).
void require_tensor_alignment(const LayerTensors& layer, const TensorAlignment& need, bool as_layer);

class LayerBoundRun : public PreparedRun {
 public:
  // `prepared`: the Problem's tensors, whose alignment prepare has checked.
  LayerBoundRun(const LayerTensors& prepared, const TensorAlignment& need) : prepared_(prepared), need_(need) {}
  void enqueue(void* stream) final { launch(prepared_, stream); }
  void enqueue(const LayerTensors& layer, void* stream) final;

 protected:
  // A refreshed run's own tensors become those of its new step.
  void set_prepared(const LayerTensors& prepared) { prepared_ = prepared; }

 private:
  virtual void launch(const LayerTensors& layer, void* stream) const = 0;

  LayerTensors prepared_;
  TensorAlignment need_;
};

}  // namespace helixmla::cuda

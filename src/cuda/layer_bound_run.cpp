#include "cuda/layer_bound_run.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "cuda/capture_check.hpp"
#include "helixmla/error.hpp"
#include "helixmla/validate.hpp"

namespace helixmla::cuda {

void require_alignment(const char* field, const void* pointer, std::size_t alignment, const char* backend) {
  if (alignment > 1 && reinterpret_cast<std::uintptr_t>(pointer) % alignment != 0) {
    throw InvalidArgument(field, -1, fmt::format("{}", pointer),
                          fmt::format("{} needs {}-byte alignment", backend, alignment));
  }
}

Verdict check_alignment(const AddressAlignment& have, const TensorAlignment& need) {
  const struct {
    const char* tensor;
    std::int32_t has;
    std::size_t needs;
  } tensors[] = {{"q", have.q, need.q},
                 {"kv.pool", have.kv_pool, need.kv_pool},
                 {"out", have.out, need.out},
                 {"stats.data", have.stats, need.stats}};
  for (const auto& t : tensors) {
    if (static_cast<std::size_t>(t.has) < t.needs) {
      return Verdict::no(fmt::format("{} is {}-byte aligned; {} needs {}", t.tensor, t.has, need.backend, t.needs));
    }
  }
  return Verdict::yes();
}

void require_tensor_alignment(const LayerTensors& layer, const TensorAlignment& need, bool as_layer) {
  require_alignment(as_layer ? "layer.q" : "q", layer.q, need.q, need.backend);
  require_alignment(as_layer ? "layer.kv_pool" : "kv.pool", layer.kv_pool, need.kv_pool, need.backend);
  require_alignment(as_layer ? "layer.out" : "out", layer.out, need.out, need.backend);
  if (layer.stats) require_alignment(as_layer ? "layer.stats" : "stats.data", layer.stats, need.stats, need.backend);
}

PreparedRun::Refresh LayerBoundRun::plan_refresh(const Problem& next) {
  require_tensor_alignment(layer_tensors(next), need_, false);
  if (next.location.kind != Location::Kind::cuda || next.location.device != device_ ||
      next.softmax_scale != softmax_scale_) {
    return {};
  }
  Refresh upload = take_metadata(next);
  if (!upload) return {};
  return [this, next, upload = std::move(upload)](void* stream) {
    const MetadataUploadScope scope(stream, device_);
    upload(stream);
    prepared_ = layer_tensors(next);
  };
}

void LayerBoundRun::check_layer(const LayerTensors& layer) const {
  validate_layer(layer, prepared_.stats != nullptr);
  require_tensor_alignment(layer, need_, true);
}

void LayerBoundRun::enqueue(const LayerTensors& layer, void* stream) {
  check_layer(layer);
  launch(layer, stream);
}

}  // namespace helixmla::cuda

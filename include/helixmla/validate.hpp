// One validator for every rule of the batch model. It stops at the first
// violated rule and names the field, the index and the value.
#pragma once

#include "helixmla/problem.hpp"

namespace helixmla {

inline constexpr std::int32_t kMaxHeads = 128;

// Throws InvalidArgument on the first violated rule.
void validate(const Problem& problem);

// The rules a layer's tensors must meet in a run prepared for another layer
// (fields named `layer.*`): every tensor present, statistics exactly when
// the run was prepared with them, a finite positive KV scale.
void validate_layer(const LayerTensors& layer, bool prepared_with_stats);

}  // namespace helixmla

#include "helixmla/planner.hpp"

#include <cstddef>
#include <type_traits>

namespace helixmla {

namespace {

// Offsets only real buffers: metadata-only problems (selection, sweeps) carry
// null tensors and must stay null.
template <typename T>
T* advance(T* pointer, std::int64_t bytes) {
  if (pointer == nullptr) return nullptr;
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(pointer) + bytes);
}

Phase make_phase(const Problem& whole, PhaseKind kind, std::int32_t first_request,
                 std::int32_t requests) {
  std::int64_t first_token = 0;
  for (std::int32_t r = 0; r < first_request; ++r) first_token += whole.q_len[r];
  std::int64_t tokens = 0;
  for (std::int32_t r = first_request; r < first_request + requests; ++r) tokens += whole.q_len[r];

  Phase phase;
  phase.kind = kind;
  phase.first_request = first_request;
  phase.first_token = first_token;

  Problem& part = phase.problem;
  part = with_layer(whole, phase_layer(whole, layer_tensors(whole), first_token));
  if (whole.stats.present()) part.stats.tokens = tokens;
  part.q_len = whole.q_len.subspan(first_request, requests);
  part.kv_len = whole.kv_len.subspan(first_request, requests);
  const std::size_t stride = static_cast<std::size_t>(whole.page_table_stride);
  part.page_table = whole.page_table.subspan(first_request * stride, requests * stride);
  if (!whole.helix.token_kv_bounds.empty()) {
    part.helix.token_kv_bounds = whole.helix.token_kv_bounds.subspan(
        static_cast<std::size_t>(first_token), static_cast<std::size_t>(tokens));
  }
  part.num_contexts = kind == PhaseKind::context ? requests : 0;
  return phase;
}

}  // namespace

LayerTensors phase_layer(const Problem& whole, const LayerTensors& layer, std::int64_t first_token) {
  const std::int64_t heads = whole.num_heads;
  LayerTensors part = layer;
  part.q = advance(layer.q, first_token * heads * whole.dims.head_dim() *
                                static_cast<std::int64_t>(dtype_size(whole.q_dtype)));
  part.out = advance(layer.out, first_token * heads * whole.dims.kv_lora_rank *
                                    static_cast<std::int64_t>(dtype_size(whole.out_dtype)));
  part.stats = advance(layer.stats, first_token * whole.stats.heads * whole.stats.width *
                                        static_cast<std::int64_t>(sizeof(float)));
  return part;
}

PhasePlan plan_phases(const Problem& problem) {
  PhasePlan plan;
  const std::int32_t contexts = problem.num_contexts;
  const std::int32_t generations = problem.num_generations();
  if (contexts > 0) plan.context = make_phase(problem, PhaseKind::context, 0, contexts);
  if (generations > 0) {
    plan.generation = make_phase(problem, PhaseKind::generation, contexts, generations);
  }
  return plan;
}

}  // namespace helixmla

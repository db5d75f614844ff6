// Splits a mixed batch into its context part and its generation part
// (DESIGN §3). Each part is a Problem of its own whose pointers, lengths,
// page-table rows and Helix bounds are relative to the part: row 0 of the
// generation part is request `num_contexts` of the whole batch.
#pragma once

#include <cstdint>
#include <optional>

#include "helixmla/problem.hpp"

namespace helixmla {

enum class PhaseKind : std::uint8_t { context, generation };

struct Phase {
  PhaseKind kind = PhaseKind::generation;
  std::int32_t first_request = 0;  // in the whole batch
  std::int64_t first_token = 0;    // in the whole batch
  Problem problem;                 // part-relative view
};

struct PhasePlan {
  std::optional<Phase> context;
  std::optional<Phase> generation;
};

// Expects a validated problem.
PhasePlan plan_phases(const Problem& problem);

// A layer's tensors as the phase starting at `first_token` sees them (the
// offsets plan_phases gives a part's pointers); null tensors stay null.
LayerTensors phase_layer(const Problem& whole, const LayerTensors& layer, std::int64_t first_token);

}  // namespace helixmla

// Preparing and launching the tensor-core kernel for one phase: variant
// choice, work plan, metadata upload, and the graph-capturable launch.
#pragma once

#include <cstddef>
#include <memory>

#include "cuda/layer_bound_run.hpp"
#include "cuda/tensorcore_variants.hpp"
#include "helixmla/backend.hpp"

namespace helixmla::cuda {

// The kernel's 16-byte cp.async loads, 4-byte output stores and 8-byte stats
// stores need aligned tensors; a misaligned access would poison the context.
inline constexpr TensorAlignment kTensorcoreAlignment{"cuda_tensorcore", 16, 16, 4, 8};

// The variant the backend runs for a phase (a planner part or a whole
// single-phase batch): the same one can_implement names for its shape.
TensorcoreVariant tensorcore_variant_of(const Problem& phase);

std::size_t tensorcore_workspace_bytes(const Problem& phase, const TensorcoreVariant& variant);

// Plans the phase for `variant`, loads or compiles its kernel and enqueues
// the metadata upload on `stream`. An empty workspace makes the run allocate
// its own. Tests call this with variants the catalog would not pick.
std::unique_ptr<PreparedRun> prepare_tensorcore(const Problem& phase, const TensorcoreVariant& variant,
                                                Workspace workspace, void* stream);

}  // namespace helixmla::cuda

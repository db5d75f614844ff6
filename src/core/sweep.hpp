// Totality sweep (DESIGN §4): run every shape of the supported space through
// the selector and report which backend wins where and every shape no backend
// can run. The selection is pure host work; a caller that also wants to run
// each point (a GPU sweep) passes a visitor and receives every point with its
// decision.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "helixmla/selector.hpp"

namespace helixmla {

struct SweepSpace {
  std::vector<Arch> archs{std::begin(kAllArchs), std::end(kAllArchs)};
  std::vector<std::int32_t> heads;       // default 1..128
  std::vector<std::int32_t> q_lens;      // default 1..16
  std::vector<std::int32_t> page_sizes{1, 2, 3, 4, 8, 16, 32, 48, 64, 96, 128, 256};
  std::vector<DType> kv_dtypes{DType::bf16, DType::fp16, DType::fp8_e4m3};
  // Q (and output) types swept with an fp8 KV cache; a bf16 or fp16 cache
  // fixes Q to its own type. The first is the one the pictures show.
  std::vector<DType> fp8_q_dtypes{DType::bf16, DType::fp16};
  std::vector<bool> helix{false, true};
  bool mixed_batches = true;             // also batches with a context part before the generations
  std::vector<PhaseKind> phases{PhaseKind::context, PhaseKind::generation};  // phases selected
  std::int32_t cp_size = 2;              // of Helix cells
  std::int32_t generations = 1;          // requests of the generation part
  std::int32_t contexts = 2;             // of mixed batches
  std::int32_t context_len = 64;
  // Tensors live on the GPU for every architecture but `none` (a build with
  // CUDA backends, or a profile of GPU libraries); otherwise in host memory.
  bool device_tensors = false;

  SweepSpace();
};

// One selection of the sweep: a phase of one batch on one architecture.
struct SweepPoint {
  const Environment& env;
  bool mixed;                  // the batch also has a context part
  const PhaseShape& shape;
  const Decision* decision;    // null when no backend can run the shape
};

struct SweepIssue {
  Arch arch = Arch::none;
  PhaseShape shape;
  std::vector<Candidate> candidates;  // every backend's verdict, priority order
};

// heads x page size of one slice of the space, for pictures.
struct SweepPanel {
  std::string title;
  DType kv_dtype = DType::bf16;
  bool helix = false;
  std::int32_t q_len = 1;
  // [head index][page index]: backend index into SweepResult::backends, or
  // kUnroutable / kFailsAtRun.
  std::vector<std::int16_t> cells;
  static constexpr std::int16_t kUnroutable = -1;
  static constexpr std::int16_t kFailsAtRun = -2;
};

struct SweepArch {
  Arch arch = Arch::none;
  std::int64_t points = 0;
  std::int64_t unroutable_points = 0;
  std::map<std::string, std::int64_t> wins;  // points won per backend
  std::vector<SweepPanel> panels;
};

struct SweepResult {
  SweepSpace space;
  std::vector<std::string> backends;    // priority order
  std::vector<SweepArch> archs;
  std::vector<SweepIssue> unroutable;   // each distinct shape no backend can run
  std::vector<SweepIssue> fails_at_run; // chosen, but its deferred kernel lookup fails
  std::int64_t points() const;
};

struct SweepHooks {
  std::function<void(const SweepPoint&)> visit;
  std::function<void(Arch arch, double fraction_done)> progress;
};

// The environment a sweep assumes for `arch`: every given backend built, NVRTC present.
Environment sweep_environment(const std::vector<BackendPtr>& backends, Arch arch);

SweepResult sweep(const std::vector<BackendPtr>& backends, const SweepSpace& space,
                  const SweepHooks& hooks = {});

// Small multiples of heads x page size coloured by the chosen backend.
std::string sweep_svg(const SweepResult& result, const SweepArch& arch);

}  // namespace helixmla

// The backend interface (DESIGN §4). A backend declares what it can run; the
// selector asks. Capability is decided from a PhaseShape, which holds only
// discrete or bucketed facts so that a decision can be cached by it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "helixmla/dtype.hpp"
#include "helixmla/environment.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/problem.hpp"

namespace helixmla {

struct Verdict {
  bool ok = true;
  std::string reason;  // why not (empty when ok), or a note on how it would run
  static Verdict yes(std::string note = {}) { return {true, std::move(note)}; }
  static Verdict no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

enum class MaskKind : std::uint8_t { linear, tree, custom };

// Of each tensor's address, the largest power of two dividing it, up to 16
// (16 for a tensor not given): kernels with wide loads need aligned tensors,
// so whether a backend can run a phase depends on it.
struct AddressAlignment {
  std::int32_t q = 16, kv_pool = 16, out = 16, stats = 16;
  bool operator==(const AddressAlignment&) const = default;
};

// Everything about a phase that can change which backend may or should run it.
// Batch size enters only as a power-of-two bucket (floor), so backends and
// performance tables must not depend on finer batch sizes than that.
struct PhaseShape {
  PhaseKind phase = PhaseKind::generation;
  MlaDims dims;
  std::int32_t num_heads = 0;
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  std::int32_t page_size = 0;
  std::int32_t q_len = 1;          // uniform q_len of the phase; 0 when it varies (contexts)
  std::int32_t max_q_len = 1;      // bucketed (next power of two) for context phases
  std::int32_t batch_bucket = 1;   // floor power of two of the phase's request count
  bool batch_has_generations = true;  // of the whole batch, not only this phase
  bool helix = false;
  std::int32_t cp_size = 1;
  bool has_stats = false;
  bool stats_fp32_contiguous = true;  // stats buffer is float32 [tokens, H, 2]
  std::int32_t beam_width = 1;
  MaskKind mask = MaskKind::linear;
  bool on_device = false;          // tensors are in CUDA device memory
  AddressAlignment alignment;

  bool operator==(const PhaseShape&) const = default;
};

std::size_t hash_value(const PhaseShape& shape);
std::string describe(const PhaseShape& shape);  // one line, for traces and errors
std::int32_t batch_bucket_of(std::int64_t requests);
// Ceiling power of two of a phase's longest q_len, capped at the largest int32.
std::int32_t max_q_len_bucket_of(std::int64_t longest_q_len);
// Shape of a phase produced by the planner; `whole` is the batch it came from.
PhaseShape shape_of(const Phase& phase, const Problem& whole);

struct KernelVariant {
  std::string name;
  bool precompiled = true;  // false: produced just in time (NVRTC)
};

// Which concrete kernels a backend has or can produce. `can_implement` is the
// final word on whether a shape runs; it names the variant that would.
class KernelCatalog {
 public:
  virtual ~KernelCatalog() = default;
  virtual std::vector<KernelVariant> inventory(const Environment& env) const = 0;
  virtual Verdict can_implement(const PhaseShape& shape, const Environment& env,
                                KernelVariant* chosen = nullptr) const = 0;
};

// Device memory a prepared run owns until it is destroyed: GPU backends keep
// the run's uploaded metadata (work list, page table, bounds) and split-KV
// partials there, so two live prepared runs (for example two captured graphs)
// must not share one. The size is a query on the backend. Passing none makes
// the run allocate its own, whose release (cudaFree) waits for the device:
// engines that prepare every step should pass a workspace.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// A run prepared on the host (metadata built and uploaded, or copied): the
// caller's metadata (lengths, page table, bounds) may change once prepare
// returns; its tensors are read at every enqueue. On the CUDA backends,
// `enqueue` only launches work on the stream: no host synchronisation, no
// allocation, so it may be captured into a CUDA graph and replayed. The cpu
// backend's runs (host tensors) instead compute the phase on the calling
// thread before `enqueue` returns and ignore the stream. A run's launches
// share its workspace (split-KV partials), so its enqueues must run one
// after another: on one stream, or on streams ordered by events; never two
// at once.
class PreparedRun {
 public:
  virtual ~PreparedRun() = default;
  // On the tensors of the Problem the run was prepared for.
  virtual void enqueue(void* stream) = 0;
  // The same batch on one layer's tensors: an engine prepares once per
  // decode step and enqueues every layer, whose metadata is the same, with
  // no host work beyond the launches. Throws InvalidArgument (validate_layer
  // and the backend's alignment rules) before launching anything.
  virtual void enqueue(const LayerTensors& layer, void* stream) = 0;
  // Throws what enqueue(layer, stream) would throw for these tensors and
  // launches nothing, so a run made of several backends' runs (a mixed
  // batch) refuses a layer before its first part has launched. The default
  // checks nothing.
  virtual void check_layer(const LayerTensors& layer) const;

  // The next decode step, for graphs captured from this run's enqueues
  // (StepPlan::refresh). When `next` (this run's phase of the next step) can
  // launch exactly as the prepared phase does (same kernels, grid sizes and
  // workspace layout, so every captured launch stays valid), returns the
  // step that takes it: called once with a stream, it rewrites the run's
  // metadata in place, uploaded on that stream, outside any capture.
  // Otherwise, and for runs that cannot refresh, returns an empty function;
  // asking changes nothing. The step refers to this run and to `next`'s
  // metadata, which must outlive the call, and holds only until the run is
  // refreshed otherwise. The CUDA runs may keep their split counts for
  // `next` (handed to its row tiles by length) instead of its own best plan
  // when they launch alike and are estimated to finish within 1/32 of it
  // (src/cuda/block_schedule.hpp).
  using Refresh = std::function<void(void* stream)>;
  virtual Refresh plan_refresh(const Problem& next);
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Used when the performance table has no entry: higher wins.
  virtual int priority() const = 0;
  // Profile-only backends describe another system and are never executed.
  virtual bool executable() const { return true; }
  virtual Verdict available(const Environment& env) const = 0;
  virtual Verdict check(const PhaseShape& shape) const = 0;
  virtual const KernelCatalog& catalog() const = 0;

  virtual std::size_t workspace_bytes(const Problem& phase) const;
  // `phase` is a planner part (or a whole single-phase batch) already checked
  // by the selector. Any upload is enqueued on `stream` before returning.
  virtual std::unique_ptr<PreparedRun> prepare(const Problem& phase, Workspace workspace,
                                               void* stream) const;
};

using BackendPtr = std::shared_ptr<const Backend>;

}  // namespace helixmla

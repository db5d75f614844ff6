// Host-side work decomposition of the generic kernel: query rows grouped into
// blocks, KV ranges split when the batch alone would not fill the GPU, and
// the device workspace layout that holds the plan and the split partials.
// Pure host code: no CUDA calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cuda/generic_kernel.cuh"
#include "cuda/split_combine.hpp"
#include "helixmla/problem.hpp"

namespace helixmla::cuda {

// Splits never make a KV range shorter than this many tiles: below it the
// per-item cost (loading the queries, writing partials) outweighs the gain.
inline constexpr int kGenericMinSplitTiles = 4;

struct GenericWorkPlan {
  std::vector<GenericWorkItem> items;     // longest KV range first
  std::vector<SplitSegment> segments;     // row groups whose KV range is split
  std::vector<std::int32_t> token_bounds; // [tokens] visible KV prefix per query token
  std::int64_t split_rows = 0;            // rows that go through the combine
  std::int64_t entries = 0;               // (row, split) partials
  std::int64_t wide_split_rows = 0;       // SplitCombineArgs::wide_rows
  std::vector<std::int32_t> group_rows;   // per row group, in order (request, first row)
  std::vector<std::int32_t> group_splits;
};

// `phase` is a validated part (or whole single-phase batch). The plan aims
// for about two blocks per SM: row groups alone when there are enough of
// them, otherwise KV ranges split evenly into tile-aligned pieces.
GenericWorkPlan plan_generic_work(const Problem& phase, int sm_count);

// The plan of `phase` with the split counts of `prepared`, handed to its row
// groups by length (block_schedule.hpp, reassigned_splits): how a captured
// run takes a step whose own plan would launch differently. Empty when the
// row groups differ in number or rows.
std::optional<GenericWorkPlan> plan_generic_work_keeping_splits(const Problem& phase,
                                                                const GenericWorkPlan& prepared);

// The plan's finish time in KV tiles, items longest first on about two
// block slots per SM: what compares two plans of one phase.
std::int64_t estimated_finish(const GenericWorkPlan& plan, int sm_count);

// Byte offsets inside the workspace; every region starts 256-byte aligned.
// The metadata regions come first so that one copy uploads them all.
struct GenericWorkspaceLayout {
  std::size_t segments = 0;
  std::size_t items = 0;
  std::size_t token_bounds = 0;
  std::size_t page_table = 0;
  std::size_t metadata_bytes = 0;  // end of the uploaded part
  std::size_t partial_out = 0;
  std::size_t partial_stats = 0;
  std::size_t total_bytes = 0;
};

GenericWorkspaceLayout generic_workspace_layout(const GenericWorkPlan& plan, const Problem& phase);

}  // namespace helixmla::cuda

// Host-side work decomposition for the tensor-core kernel: which blocks run,
// over which rows and KV ranges, where split partials go, and the layout of
// the workspace. A pure function of the phase's host metadata and the GPU's
// size, so workspace_bytes and prepare agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cuda/split_combine.hpp"
#include "cuda/tensorcore_kernel.cuh"
#include "helixmla/problem.hpp"

namespace helixmla::cuda {

struct TensorcorePlan {
  std::int32_t rows_tile = 64;
  std::vector<helixmla_tc::WorkItem> items;  // launch order: longest first
  std::vector<SplitSegment> segments;        // row tiles whose KV is split
  std::int64_t entries = 0;                  // split partial entries
  std::int64_t split_rows = 0;               // rows that need the combine
  std::int64_t wide_split_rows = 0;          // SplitCombineArgs::wide_rows
  std::vector<std::int32_t> row_tile_rows;   // per row tile, in order (request, first row)
  std::vector<std::int32_t> row_tile_splits;

  // Workspace layout (byte offsets); the first `metadata_bytes` are uploaded.
  std::size_t items_offset = 0;
  std::size_t segments_offset = 0;
  std::size_t bounds_offset = 0;
  std::size_t page_table_offset = 0;  // the phase's page table is host memory too
  std::size_t metadata_bytes = 0;
  std::size_t partial_out_offset = 0;
  std::size_t partial_stats_offset = 0;
  std::size_t workspace_bytes = 0;
};

// The split search of one phase for one row tile size on `parallel_blocks`
// block slots (multiprocessors times blocks per multiprocessor): the KV of
// long requests is split until the work fills the slots evenly. A refresh
// asks one step for up to three answers (the plan with kept split counts,
// a lower bound, the searched plan); what they share (the row tiles, their
// KV tile histogram, the bounded split candidates) is built once, when an
// answer first needs it. The phase's metadata is read in place, so the
// phase must outlive the search.
class TensorcoreSplitSearch {
 public:
  TensorcoreSplitSearch(const Problem& phase, std::int32_t rows_tile, std::int32_t parallel_blocks);
  ~TensorcoreSplitSearch();
  TensorcoreSplitSearch(const TensorcoreSplitSearch&) = delete;
  TensorcoreSplitSearch& operator=(const TensorcoreSplitSearch&) = delete;

  // The plan whose split chunk finishes soonest by estimated_finish.
  TensorcorePlan plan() const;

  // The plan with the split counts of `prepared` (the same row tile size),
  // handed to this phase's row tiles by length (block_schedule.hpp,
  // reassigned_splits): how a captured run takes a step whose own best plan
  // would launch differently. Empty when the row tiles differ in number or
  // rows.
  std::optional<TensorcorePlan> plan_keeping_splits(const TensorcorePlan& prepared) const;

  // A finish time no plan the search considers beats by estimated_finish
  // (its candidates' cheap bounds, without their exact placements): enough
  // to tell that kept split counts are within reach of the searched plan
  // without searching.
  std::int64_t finish_lower_bound() const;

  // The plan a run prepared with `prepared` takes for this phase when it is
  // refreshed (a captured graph replays it), where `launches_alike` says
  // whether a plan launches as the prepared run does (grid, workspace
  // layout and size): the kept split counts when they launch alike and
  // keeping them pays against the lower bound, which skips the search;
  // else the searched plan when it launches alike; else the kept counts
  // when keeping them pays against it (block_schedule.hpp). Null when none
  // does: prepare anew.
  std::shared_ptr<const TensorcorePlan> plan_to_refresh(
      const TensorcorePlan& prepared, const std::function<bool(const TensorcorePlan&)>& launches_alike) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  friend std::shared_ptr<const TensorcorePlan> tensorcore_plan_for(const TensorcoreSplitSearch& search);
};

// TensorcoreSplitSearch(phase, rows_tile, parallel_blocks).plan().
TensorcorePlan plan_tensorcore(const Problem& phase, std::int32_t rows_tile, std::int32_t parallel_blocks);

// The plan's finish time on `parallel_blocks` as the split search estimates
// it (KV tiles, items longest first on the least-loaded block slot, plus
// the fixed costs of items and of splitting): what compares two plans of
// one phase.
std::int64_t estimated_finish(const TensorcorePlan& plan, std::int32_t parallel_blocks);

// plan_tensorcore, remembered per thread: an engine sizes the workspace and
// then prepares the same phase, and each needs the plan. The last plan this
// thread built is returned again while everything the plan reads (heads,
// q_len, kv_len, Helix bounds, page-table size, row tile, block slots; one
// struct in the .cpp is both the planner's input and the key) is equal in
// value; the caller's spans may change between calls. The second form
// searches with what `search` has already built when the plan is not the
// remembered one.
std::shared_ptr<const TensorcorePlan> tensorcore_plan_for(const Problem& phase, std::int32_t rows_tile,
                                                          std::int32_t parallel_blocks);
std::shared_ptr<const TensorcorePlan> tensorcore_plan_for(const TensorcoreSplitSearch& search);

}  // namespace helixmla::cuda

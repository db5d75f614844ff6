// How long a grid of work items takes on the GPU's block slots, as the
// planners of both CUDA backends estimate it, and when a refreshed run may
// keep its prepared split counts. Pure host code.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory_resource>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace helixmla::cuda {

// Item costs (in KV tiles) as cost -> how many items, longest first. Row
// tiles of a decode batch mostly share their length, so a plan's thousands
// of items have a handful of distinct costs.
using CostCounts = std::pmr::map<std::int64_t, std::int64_t, std::greater<>>;

// Items of one cost: (cost, how many).
using CostRun = std::pair<std::int64_t, std::int64_t>;

// Time to finish all items on `slots` parallel blocks, greedily longest first
// (each item to a least-loaded slot, as the block scheduler hands out blocks
// in launch order). `longest_first`: runs by descending cost (a cost may
// come in several runs).
std::int64_t makespan(std::span<const CostRun> longest_first, std::int32_t slots, std::pmr::memory_resource* arena);
std::int64_t makespan(const CostCounts& costs, std::int32_t slots, std::pmr::memory_resource* arena);

// The split counts `kept_splits` of row tiles of `kept_rows` rows handed to
// the row tiles of a new step (`rows`, `tiles` each): among tiles of equal
// rows, the longest takes the most splits, as a fresh plan gives them (its
// split count grows with the length). The item, split-row, partial-entry
// and wide-row counts are then those of the kept plan (the page table, the
// bounds and the workspace still have to match: callers compare the whole
// launch), and a request replaced by a longer one anywhere in the batch
// finds the splits where they are needed. Empty when the row tiles differ
// in number or rows.
std::optional<std::vector<std::int32_t>> reassigned_splits(std::span<const std::int32_t> kept_rows,
                                                            std::span<const std::int32_t> kept_splits,
                                                            std::span<const std::int32_t> rows,
                                                            std::span<const std::int64_t> tiles);

// A captured run refreshed for a step keeps its split counts (the same
// grid, on other lengths) when they are estimated to finish within 1/32 of
// the step's own plan: an engine would rather replay its graph a little
// slower than prepare and capture again. Why 1/32 and what it costs on
// decode traces: bench/RESULTS.md, session 20.
inline bool keeping_splits_pays(std::int64_t kept_finish, std::int64_t best_finish) {
  return kept_finish * 32 <= best_finish * 33;
}

}  // namespace helixmla::cuda

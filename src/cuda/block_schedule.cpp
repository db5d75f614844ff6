#include "cuda/block_schedule.hpp"

#include <algorithm>

namespace helixmla::cuda {

// Slots of equal load are interchangeable, so they are kept as load -> how
// many, and items of one cost fill them a group at a time: the same finish
// time as placing the items one by one.
std::int64_t makespan(std::span<const CostRun> longest_first, std::int32_t slots, std::pmr::memory_resource* arena) {
  std::pmr::map<std::int64_t, std::int64_t> slots_at_load(arena);
  slots_at_load.emplace(0, slots);
  std::int64_t finish = 0;
  for (auto [cost, count] : longest_first) {
    while (count > 0) {
      const auto least = slots_at_load.begin();
      const std::int64_t load = least->first;
      const std::int64_t take = std::min(count, least->second);
      if (take == least->second) {
        slots_at_load.erase(least);
      } else {
        least->second -= take;
      }
      slots_at_load[load + cost] += take;
      finish = std::max(finish, load + cost);
      count -= take;
    }
  }
  return finish;
}

std::int64_t makespan(const CostCounts& costs, std::int32_t slots, std::pmr::memory_resource* arena) {
  const std::pmr::vector<CostRun> runs(costs.begin(), costs.end(), arena);
  return makespan(runs, slots, arena);
}

std::optional<std::vector<std::int32_t>> reassigned_splits(std::span<const std::int32_t> kept_rows,
                                                            std::span<const std::int32_t> kept_splits,
                                                            std::span<const std::int32_t> rows,
                                                            std::span<const std::int64_t> tiles) {
  if (rows.size() != kept_rows.size() || tiles.size() != rows.size()) return std::nullopt;
  // Row tiles by (rows, longest first), kept counts by (rows, most first):
  // the two orders pair them up group by group.
  std::vector<std::size_t> order(rows.size()), kept_order(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) order[i] = kept_order[i] = i;
  std::ranges::stable_sort(order, [&](std::size_t a, std::size_t b) {
    return rows[a] != rows[b] ? rows[a] < rows[b] : tiles[a] > tiles[b];
  });
  std::ranges::stable_sort(kept_order, [&](std::size_t a, std::size_t b) {
    return kept_rows[a] != kept_rows[b] ? kept_rows[a] < kept_rows[b] : kept_splits[a] > kept_splits[b];
  });
  std::vector<std::int32_t> splits(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[order[i]] != kept_rows[kept_order[i]]) return std::nullopt;
    splits[order[i]] = kept_splits[kept_order[i]];
  }
  return splits;
}

}  // namespace helixmla::cuda

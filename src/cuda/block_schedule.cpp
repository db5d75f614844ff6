#include "cuda/block_schedule.hpp"

#include <algorithm>

namespace helixmla::cuda {

// Slots of equal load are interchangeable, so they are kept as load -> how
// many, and items of one cost fill them a group at a time: the same finish
// time as placing the items one by one.
std::int64_t makespan(const CostCounts& costs, std::int32_t slots, std::pmr::memory_resource* arena) {
  std::pmr::map<std::int64_t, std::int64_t> slots_at_load(arena);
  slots_at_load.emplace(0, slots);
  std::int64_t finish = 0;
  for (auto [cost, count] : costs) {
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

}  // namespace helixmla::cuda

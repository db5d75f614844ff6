#include "cuda/generic_work_plan.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <memory_resource>
#include <string>

#include "cuda/block_schedule.hpp"
#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

struct RowGroup {
  std::int32_t request = 0;
  std::int64_t out_row = 0;
  std::int32_t rows = 0;
  std::int32_t kv = 0;  // longest visible prefix among the group's rows
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::size_t align_up(std::size_t value) { return (value + 255) / 256 * 256; }

std::vector<std::int32_t> token_bounds_of(const Problem& phase) {
  std::vector<std::int32_t> bounds;
  bounds.reserve(static_cast<std::size_t>(phase.num_tokens()));
  const auto& helix = phase.helix.token_kv_bounds;
  for (std::int32_t r = 0; r < phase.num_requests(); ++r) {
    const std::int32_t q_len = phase.q_len[r];
    const std::int32_t kv_len = phase.kv_len[r];
    for (std::int32_t t = 0; t < q_len; ++t) {
      const std::int64_t bound = helix.empty() ? visible_kv(kv_len, q_len, t) : helix[bounds.size()];
      bounds.push_back(static_cast<std::int32_t>(std::clamp<std::int64_t>(bound, 0, kv_len)));
    }
  }
  return bounds;
}

// Rows of a request in near-equal groups of whole warps (4 rows), so that
// 20 rows become 12 + 8 rather than 16 + 4.
std::vector<RowGroup> row_groups_of(const Problem& phase, const std::vector<std::int32_t>& bounds) {
  std::vector<RowGroup> groups;
  const std::int64_t heads = phase.num_heads;
  std::int64_t first_token = 0;
  for (std::int32_t r = 0; r < phase.num_requests(); ++r) {
    const std::int64_t rows = phase.q_len[r] * heads;
    const std::int64_t count = ceil_div(rows, kGenericRowsPerBlock);
    const std::int64_t per_group =
        std::min<std::int64_t>(kGenericRowsPerBlock, ceil_div(ceil_div(rows, count), 4) * 4);
    for (std::int64_t row = 0; row < rows; row += per_group) {
      RowGroup g;
      g.request = r;
      g.out_row = first_token * heads + row;
      g.rows = static_cast<std::int32_t>(std::min(per_group, rows - row));
      const std::int64_t last_token = first_token + (row + g.rows - 1) / heads;
      for (std::int64_t t = first_token + row / heads; t <= last_token; ++t) {
        g.kv = std::max(g.kv, bounds[static_cast<std::size_t>(t)]);
      }
      groups.push_back(g);
    }
    first_token += phase.q_len[r];
  }
  return groups;
}

}  // namespace

namespace {

// The plan of `groups` with `splits[i]` near-equal tile-aligned KV ranges of
// row group i.
GenericWorkPlan plan_with_splits(const Problem& phase, std::vector<std::int32_t> bounds,
                                 const std::vector<RowGroup>& groups, std::vector<std::int32_t> splits) {
  GenericWorkPlan plan;
  plan.token_bounds = std::move(bounds);
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const RowGroup& g = groups[i];
    const std::int64_t tiles = ceil_div(g.kv, kGenericTileTokens);
    GenericWorkItem item;
    item.out_row = g.out_row;
    item.request = g.request;
    item.rows = g.rows;
    if (splits[i] == 1) {
      item.kv_begin = 0;
      item.kv_end = g.kv;
      plan.items.push_back(item);
      continue;
    }
    SplitSegment segment;
    segment.first_partial_row = plan.split_rows;
    segment.first_entry = plan.entries;
    segment.first_out_row = g.out_row;
    segment.rows = g.rows;
    segment.splits = splits[i];
    plan.segments.push_back(segment);
    for (std::int64_t s = 0; s < splits[i]; ++s) {
      const std::int64_t first_tile = s * tiles / splits[i];
      const std::int64_t end_tile = (s + 1) * tiles / splits[i];
      item.kv_begin = static_cast<std::int32_t>(first_tile * kGenericTileTokens);
      item.kv_end = static_cast<std::int32_t>(std::min<std::int64_t>(end_tile * kGenericTileTokens, g.kv));
      item.partial_entry = plan.entries + s;
      item.partial_stride = segment.splits;
      plan.items.push_back(item);
    }
    plan.split_rows += g.rows;
    plan.entries += std::int64_t{g.rows} * splits[i];
  }
  plan.group_splits = std::move(splits);
  for (const RowGroup& g : groups) plan.group_rows.push_back(g.rows);
  plan.wide_split_rows = arrange_split_segments(plan.segments);
  // Long ranges first: the blocks that start last are the short ones, which
  // trims the tail of the grid.
  std::stable_sort(plan.items.begin(), plan.items.end(), [](const GenericWorkItem& a, const GenericWorkItem& b) {
    return a.kv_end - a.kv_begin > b.kv_end - b.kv_begin;
  });
  if (plan.items.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw InvalidArgument("q_len", -1, std::to_string(phase.num_tokens()),
                          "too many query rows for one generic-kernel grid");
  }
  return plan;
}

// Blocks the plan aims to keep busy: about two per SM.
std::int64_t block_slots(int sm_count) { return 2 * static_cast<std::int64_t>(std::max(sm_count, 1)); }

}  // namespace

GenericWorkPlan plan_generic_work(const Problem& phase, int sm_count) {
  std::vector<std::int32_t> bounds = token_bounds_of(phase);
  const std::vector<RowGroup> groups = row_groups_of(phase, bounds);

  std::int64_t total_tiles = 0;
  for (const RowGroup& g : groups) total_tiles += ceil_div(g.kv, kGenericTileTokens);
  const std::int64_t target_items = block_slots(sm_count);
  std::int64_t chunk_tiles = std::numeric_limits<std::int64_t>::max();
  if (static_cast<std::int64_t>(groups.size()) < target_items && total_tiles > 0) {
    chunk_tiles = std::max<std::int64_t>(kGenericMinSplitTiles, ceil_div(total_tiles, target_items));
  }
  std::vector<std::int32_t> splits;
  splits.reserve(groups.size());
  for (const RowGroup& g : groups) {
    const std::int64_t tiles = ceil_div(g.kv, kGenericTileTokens);
    splits.push_back(static_cast<std::int32_t>(tiles > chunk_tiles ? ceil_div(tiles, chunk_tiles) : 1));
  }
  return plan_with_splits(phase, std::move(bounds), groups, std::move(splits));
}

std::optional<GenericWorkPlan> plan_generic_work_keeping_splits(const Problem& phase,
                                                                const GenericWorkPlan& prepared) {
  std::vector<std::int32_t> bounds = token_bounds_of(phase);
  const std::vector<RowGroup> groups = row_groups_of(phase, bounds);
  std::vector<std::int32_t> rows;
  std::vector<std::int64_t> tiles;
  for (const RowGroup& g : groups) {
    rows.push_back(g.rows);
    tiles.push_back(ceil_div(g.kv, kGenericTileTokens));
  }
  std::optional<std::vector<std::int32_t>> splits =
      reassigned_splits(prepared.group_rows, prepared.group_splits, rows, tiles);
  if (!splits) return std::nullopt;
  return plan_with_splits(phase, std::move(bounds), groups, std::move(*splits));
}

std::int64_t estimated_finish(const GenericWorkPlan& plan, int sm_count) {
  // A block's fixed work (queries in, outputs out) and the combine's launch,
  // in KV tiles: rough, as the plan itself does not weigh them.
  constexpr std::int64_t kItemTiles = 1;
  constexpr std::int64_t kSplitLaunchTiles = 2;
  std::array<std::byte, 8192> buffer;
  std::pmr::monotonic_buffer_resource arena(buffer.data(), buffer.size());
  CostCounts costs(&arena);
  for (const GenericWorkItem& item : plan.items) {
    costs[ceil_div(std::max(item.kv_end - item.kv_begin, 0), kGenericTileTokens) + kItemTiles] += 1;
  }
  const auto slots = static_cast<std::int32_t>(block_slots(sm_count));
  return makespan(costs, slots, &arena) + (plan.segments.empty() ? 0 : kSplitLaunchTiles);
}

GenericWorkspaceLayout generic_workspace_layout(const GenericWorkPlan& plan, const Problem& phase) {
  GenericWorkspaceLayout layout;
  std::size_t at = 0;
  const auto region = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at = align_up(at + bytes);
    return offset;
  };
  layout.segments = region(plan.segments.size() * sizeof(SplitSegment));
  layout.items = region(plan.items.size() * sizeof(GenericWorkItem));
  layout.token_bounds = region(plan.token_bounds.size() * sizeof(std::int32_t));
  layout.page_table = region(phase.page_table.size() * sizeof(std::int32_t));
  layout.metadata_bytes = at;
  const auto rank = static_cast<std::size_t>(phase.dims.kv_lora_rank);
  const auto entries = static_cast<std::size_t>(plan.entries);
  layout.partial_out = region(entries * rank * sizeof(float));
  layout.partial_stats = region(entries * 2 * sizeof(float));
  layout.total_bytes = at;
  return layout;
}

}  // namespace helixmla::cuda

#include "cuda/tensorcore_plan.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory_resource>
#include <optional>
#include <ranges>
#include <span>
#include <vector>

#include "cuda/block_schedule.hpp"

namespace helixmla::cuda {

namespace {

constexpr std::int64_t kTile = helixmla_tc::kTileTokens;
// Per-block cost besides its KV tiles (Q load, epilogue), and the cost of
// splitting at all (partials written and read, one more launch), in KV tiles.
constexpr std::int64_t kItemOverheadTiles = 2;
constexpr std::int64_t kSplitLaunchTiles = 4;
constexpr std::int64_t kMinSplitTiles = 4;
constexpr std::int32_t kMaxSplitsSearched = 64;

std::size_t align_up(std::size_t value) { return (value + 255) / 256 * 256; }

// One row tile of one request with its visible KV.
struct Unit {
  std::int32_t request = 0;
  std::int32_t token_offset = 0;
  std::int32_t row_begin = 0;
  std::int32_t rows = 0;
  std::int32_t kv_visible = 0;  // KV positions any row of the tile sees
  std::int64_t tiles() const { return (kv_visible + kTile - 1) / kTile; }
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Splits of a row tile with `tiles` KV tiles when no split may exceed `chunk`
// tiles; the splits then take ceil(tiles / splits) tiles each, the last fewer
// (possibly none: an empty split still reports l = 0 to the combine).
std::int64_t splits_for(std::int64_t tiles, std::int64_t chunk) {
  return tiles <= chunk ? 1 : ceil_div(tiles, ceil_div(tiles, ceil_div(tiles, chunk)));
}

// A row tile's items in `n` splits: `whole` splits of `per` tiles, then the
// rest (possibly none) if whole < n, then empty splits up to n.
struct SplitShape {
  std::int64_t n = 1;
  std::int64_t per = 0;
  std::int64_t whole = 0;
  SplitShape() = default;
  SplitShape(std::int64_t tiles, std::int64_t splits)
      : n(splits), per(ceil_div(tiles, n)), whole(per > 0 ? tiles / per : 0) {}
  // SplitShape(tiles, splits_for(tiles, chunk)) in three divisions, not
  // five (the split search's time was mostly divisions): splits_for's
  // length ceil(tiles / ceil(tiles / chunk)) is already `per`, and the
  // split count is the whole splits plus one for a remainder.
  static SplitShape under_chunk(std::int64_t tiles, std::int64_t chunk) {
    if (tiles <= chunk) return SplitShape(tiles, 1);
    SplitShape s;
    s.per = ceil_div(tiles, ceil_div(tiles, chunk));
    s.whole = tiles / s.per;
    s.n = s.whole + (tiles % s.per != 0 ? 1 : 0);
    return s;
  }
};

// Split chunks (in KV tiles) worth estimating, longest first: the longest
// row tile in 1 to 64 equal parts, and the chunks that spread all the tiles
// over one to four full waves of block slots. The second kind is what a few
// long requests need: two 1M-token requests on 264 slots want far more than
// 64 splits each, and one 128K-token request among short ones wants its
// splits sized by everyone's tiles, not by its own.
std::vector<std::int64_t> chunk_candidates(std::int64_t longest, std::int64_t total_tiles, std::size_t units,
                                           std::int32_t slots) {
  std::vector<std::int64_t> chunks;
  for (std::int64_t s = 1; s <= kMaxSplitsSearched; ++s) chunks.push_back(ceil_div(longest, s));
  for (std::int64_t waves = 1; waves <= 4; ++waves) {
    chunks.push_back(ceil_div(total_tiles, waves * slots));
    chunks.push_back(ceil_div(longest, ceil_div(waves * slots, static_cast<std::int64_t>(units))));
  }
  std::ranges::sort(chunks, std::greater<>());
  const auto [first, last] = std::ranges::unique(chunks);
  chunks.erase(first, last);
  std::erase_if(chunks, [&](std::int64_t c) { return c < 1 || c > longest; });
  return chunks;
}

// One split chunk to estimate, with what is cheap to know of it: its item
// count and a lower bound of its finish time.
struct Candidate {
  std::int64_t chunk = 0;
  std::int64_t items = 0;
  std::int64_t bound = 0;
};

// The row tiles' KV tile counts as (tiles, row tiles with that many),
// ascending, with their total; every candidate chunk walks it. A chunk
// leaves the row tiles it covers whole (one item each), a prefix of the
// histogram, so their sums are kept as prefix sums: on mixed lengths most
// row tiles are short and only the few long ones need walking. With the
// divisions saved below, one 128K-token request among 63 short ones (128
// heads) plans in 73-79 us, from 107-111 (bench/RESULTS.md, session 23).
struct TileHistogram {
  std::vector<std::pair<std::int64_t, std::int64_t>> units_of_tiles;
  std::vector<std::int64_t> units_before;  // [i]: row tiles of entries [0, i)
  std::vector<std::int64_t> tiles_before;  // [i]: their tiles
  std::int64_t total_tiles = 0;
  std::size_t units = 0;
  std::int64_t longest() const { return units_of_tiles.empty() ? 0 : units_of_tiles.back().first; }
  // Entries whose row tiles `chunk` leaves whole: [0, whole_below(chunk)).
  std::size_t whole_below(std::int64_t chunk) const {
    return static_cast<std::size_t>(
        std::ranges::upper_bound(units_of_tiles, chunk, {}, &std::pair<std::int64_t, std::int64_t>::first) -
        units_of_tiles.begin());
  }
};

TileHistogram histogram_of(const std::vector<Unit>& units) {
  TileHistogram h;
  h.units = units.size();
  std::vector<std::int64_t> tiles_of_units;
  tiles_of_units.reserve(units.size());
  for (const Unit& u : units) tiles_of_units.push_back(u.tiles());
  std::ranges::sort(tiles_of_units);
  for (const std::int64_t tiles : tiles_of_units) {
    if (h.units_of_tiles.empty() || h.units_of_tiles.back().first != tiles) h.units_of_tiles.emplace_back(tiles, 0);
    ++h.units_of_tiles.back().second;
    h.total_tiles += tiles;
  }
  h.units_before.assign(1, 0);
  h.tiles_before.assign(1, 0);
  for (const auto& [tiles, count] : h.units_of_tiles) {
    h.units_before.push_back(h.units_before.back() + count);
    h.tiles_before.push_back(h.tiles_before.back() + tiles * count);
  }
  return h;
}

// The chunks worth estimating with a lower bound of each one's finish time,
// in order of the bounds.
std::vector<Candidate> bounded_candidates(const TileHistogram& h, std::int32_t slots) {
  const std::int64_t longest = h.longest();
  std::vector<Candidate> candidates;
  for (const std::int64_t chunk : chunk_candidates(longest, h.total_tiles, h.units, slots)) {
    const bool split = chunk < longest;
    Candidate c{chunk, 0, 0};
    // Row tiles left whole: an item of `tiles` each (an empty one too).
    const std::size_t whole_entries = h.whole_below(chunk);
    c.items = h.units_before[whole_entries];
    std::int64_t load = h.tiles_before[whole_entries] + kItemOverheadTiles * c.items;  // every item's cost
    std::int64_t longest_item = whole_entries > 0 ? h.units_of_tiles[whole_entries - 1].first + kItemOverheadTiles : 0;
    std::int64_t shortest_item = whole_entries > 0 ? h.units_of_tiles.front().first + kItemOverheadTiles
                                                   : std::numeric_limits<std::int64_t>::max();
    for (const auto& [tiles, count] : std::span(h.units_of_tiles).subspan(whole_entries)) {
      const auto [n, per, whole] = SplitShape::under_chunk(tiles, chunk);
      c.items += n * count;
      load += (tiles + n * kItemOverheadTiles) * count;
      longest_item = std::max(longest_item, per + kItemOverheadTiles);
      shortest_item = std::min(shortest_item, (whole == n ? per : tiles - whole * per) + kItemOverheadTiles);
    }
    // Chunks only shrink from here, so the item count only grows.
    if (split && (chunk < kMinSplitTiles || c.items > static_cast<std::int64_t>(8) * slots)) break;
    // Some slot runs ceil(items / slots) items, none shorter than the
    // shortest: 192 equal items on 132 slots cost two items, not 1.45.
    const std::int64_t fullest_slot = ceil_div(c.items, slots) * shortest_item;
    c.bound = std::max({longest_item, ceil_div(load, slots), fullest_slot}) + (split ? kSplitLaunchTiles : 0);
    candidates.push_back(c);
  }
  std::ranges::stable_sort(candidates, {}, &Candidate::bound);
  return candidates;
}

// Merges adjacent runs of one cost (fewer runs for the placement to walk).
void coalesce(std::pmr::vector<CostRun>& runs) {
  std::size_t kept = 0;
  for (const CostRun& run : runs) {
    if (kept > 0 && runs[kept - 1].first == run.first) {
      runs[kept - 1].second += run.second;
    } else {
      runs[kept++] = run;
    }
  }
  runs.resize(kept);
}

// The split chunk (in KV tiles) that finishes soonest among `candidates`
// (bounded_candidates of `h`); no split when none helps. Exact finish times
// (the greedy placement) cost far more than the bounds, most of all for
// mixed lengths (many distinct slot loads), so they are computed in order
// of the bounds until no bound can beat the best time: the same choice as
// estimating every candidate. Ties go to the larger chunk (fewer splits).
std::int64_t fastest_chunk(const TileHistogram& h, const std::vector<Candidate>& candidates, std::int32_t slots) {
  const auto& units_of_tiles = h.units_of_tiles;
  const std::int64_t longest = h.longest();
  std::int64_t best_chunk = std::max<std::int64_t>(longest, 1);
  std::int64_t best_time = -1;
  for (const Candidate& c : candidates) {
    if (best_time >= 0 && c.bound > best_time) break;
    if (best_time >= 0 && c.bound == best_time && c.chunk < best_chunk) continue;
    // The candidate's runs live in a stack buffer: the search runs on every
    // step, and their nodes were most of its time in the heap allocator.
    std::array<std::byte, 8192> buffer;
    std::pmr::monotonic_buffer_resource arena(buffer.data(), buffer.size());
    // Items as runs of one cost, longest first: the row tiles the chunk
    // leaves whole (the histogram's head) need no split arithmetic.
    const std::size_t whole_entries = h.whole_below(c.chunk);
    std::pmr::vector<CostRun> runs(&arena);
    for (const auto& [tiles, count] : std::span(units_of_tiles).first(whole_entries)) {
      runs.emplace_back(tiles + kItemOverheadTiles, count);
    }
    for (const auto& [tiles, count] : std::span(units_of_tiles).subspan(whole_entries)) {
      const auto [n, per, whole] = SplitShape::under_chunk(tiles, c.chunk);
      if (whole > 0) runs.emplace_back(per + kItemOverheadTiles, whole * count);
      if (whole < n) runs.emplace_back(tiles - whole * per + kItemOverheadTiles, count);
      if (whole + 1 < n) runs.emplace_back(kItemOverheadTiles, (n - whole - 1) * count);
    }
    std::ranges::sort(runs, std::greater<>(), &CostRun::first);
    coalesce(runs);
    const std::int64_t time = makespan(runs, slots, &arena) + (c.chunk < longest ? kSplitLaunchTiles : 0);
    if (best_time < 0 || time < best_time || (time == best_time && c.chunk > best_chunk)) {
      best_time = time;
      best_chunk = c.chunk;
    }
  }
  return best_chunk;
}

// Everything of a phase its plan reads: the plan is a function of these
// alone, so they are also what a remembered plan is keyed by. Ints is a view
// (the caller's metadata) or an owned copy (the key kept for the next call).
template <typename Ints>
struct PlanInputs {
  std::int32_t heads = 0;
  std::int32_t rows_tile = 0;
  std::int32_t parallel_blocks = 0;
  std::size_t page_table_size = 0;
  Ints q_len, kv_len, token_kv_bounds;

  template <typename Other>
  bool operator==(const PlanInputs<Other>& o) const {
    return heads == o.heads && rows_tile == o.rows_tile && parallel_blocks == o.parallel_blocks &&
           page_table_size == o.page_table_size && std::ranges::equal(q_len, o.q_len) &&
           std::ranges::equal(kv_len, o.kv_len) && std::ranges::equal(token_kv_bounds, o.token_kv_bounds);
  }
};
using PhaseInputs = PlanInputs<std::span<const std::int32_t>>;
using KeptInputs = PlanInputs<std::vector<std::int32_t>>;

PhaseInputs inputs_of(const Problem& phase, std::int32_t rows_tile, std::int32_t parallel_blocks) {
  return {phase.num_heads, rows_tile, parallel_blocks, phase.page_table.size(),
          phase.q_len,     phase.kv_len, phase.helix.token_kv_bounds};
}

KeptInputs kept(const PhaseInputs& in) {
  const auto copy = [](std::span<const std::int32_t> v) { return std::vector<std::int32_t>(v.begin(), v.end()); };
  return {in.heads, in.rows_tile, in.parallel_blocks, in.page_table_size,
          copy(in.q_len), copy(in.kv_len), copy(in.token_kv_bounds)};
}

std::int32_t token_bound(const PhaseInputs& in, std::int32_t request, std::int32_t token_offset, std::int32_t t) {
  const std::int32_t kv = in.kv_len[static_cast<std::size_t>(request)];
  std::int64_t bound = in.token_kv_bounds.empty()
                           ? visible_kv(kv, in.q_len[static_cast<std::size_t>(request)], t)
                           : in.token_kv_bounds[static_cast<std::size_t>(token_offset + t)];
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(bound, 0, kv));
}

// The phase's row tiles in order (request, first row).
std::vector<Unit> units_of(const PhaseInputs& in) {
  std::vector<Unit> units;
  std::int32_t token_offset = 0;
  for (std::int32_t r = 0; r < static_cast<std::int32_t>(in.q_len.size()); ++r) {
    const std::int32_t q_len = in.q_len[static_cast<std::size_t>(r)];
    const std::int32_t rows = q_len * in.heads;
    for (std::int32_t begin = 0; begin < rows; begin += in.rows_tile) {
      Unit u;
      u.request = r;
      u.token_offset = token_offset;
      u.row_begin = begin;
      u.rows = std::min(in.rows_tile, rows - begin);
      const std::int32_t last_token = (begin + u.rows - 1) / in.heads;
      for (std::int32_t t = begin / in.heads; t <= last_token; ++t) {
        u.kv_visible = std::max(u.kv_visible, token_bound(in, r, token_offset, t));
      }
      units.push_back(u);
    }
    token_offset += q_len;
  }
  return units;
}

// The plan of `units` with `splits[i]` splits of row tile i.
TensorcorePlan plan_with_splits(const PhaseInputs& in, const std::vector<Unit>& units,
                                std::vector<std::int32_t> splits) {
  TensorcorePlan plan;
  plan.rows_tile = in.rows_tile;
  const std::int32_t heads = in.heads;
  std::vector<std::pair<std::int64_t, helixmla_tc::WorkItem>> ordered;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    helixmla_tc::WorkItem item{};
    item.token_offset = u.token_offset;
    item.q_len = in.q_len[static_cast<std::size_t>(u.request)];
    item.kv_len = in.kv_len[static_cast<std::size_t>(u.request)];
    item.request = u.request;
    item.row_begin = u.row_begin;
    const SplitShape split(u.tiles(), splits[i]);
    const std::int64_t n = split.n;
    if (n == 1) {
      item.kv_begin = 0;
      item.kv_end = u.kv_visible;
      item.split = -1;
      item.splits = 1;
      ordered.emplace_back(u.kv_visible, item);
      continue;
    }
    const std::int64_t per = split.per * kTile;
    SplitSegment seg;
    seg.first_partial_row = plan.split_rows;
    seg.first_entry = plan.entries;
    seg.first_out_row = std::int64_t{u.token_offset} * heads + u.row_begin;
    seg.rows = u.rows;
    seg.splits = static_cast<std::int32_t>(n);
    plan.segments.push_back(seg);
    for (std::int64_t s = 0; s < n; ++s) {
      // Empty splits (past the visible KV) start where it ends.
      item.kv_begin = static_cast<std::int32_t>(std::min<std::int64_t>(u.kv_visible, s * per));
      item.kv_end = static_cast<std::int32_t>(std::min<std::int64_t>(u.kv_visible, (s + 1) * per));
      item.split = static_cast<std::int32_t>(s);
      item.splits = static_cast<std::int32_t>(n);
      item.first_entry = static_cast<std::int32_t>(plan.entries);
      ordered.emplace_back(item.kv_end - item.kv_begin, item);
    }
    plan.entries += std::int64_t{u.rows} * n;
    plan.split_rows += u.rows;
  }
  plan.row_tile_splits = std::move(splits);
  for (const Unit& u : units) plan.row_tile_rows.push_back(u.rows);
  plan.wide_split_rows = arrange_split_segments(plan.segments);
  // Longest first lets the block scheduler balance uneven lengths; stable, so
  // the row tiles of one request stay neighbours and share KV through L2.
  const auto longer = [](const auto& a, const auto& b) { return a.first > b.first; };
  if (!std::is_sorted(ordered.begin(), ordered.end(), longer)) std::stable_sort(ordered.begin(), ordered.end(), longer);
  plan.items.reserve(ordered.size());
  for (const auto& entry : ordered) plan.items.push_back(entry.second);

  plan.items_offset = 0;
  plan.segments_offset = align_up(plan.items.size() * sizeof(helixmla_tc::WorkItem));
  plan.bounds_offset =
      plan.segments_offset + align_up(plan.segments.size() * sizeof(SplitSegment));
  plan.page_table_offset =
      plan.bounds_offset + align_up(in.token_kv_bounds.size() * sizeof(std::int32_t));
  plan.metadata_bytes =
      plan.page_table_offset + align_up(in.page_table_size * sizeof(std::int32_t));
  plan.partial_out_offset = plan.metadata_bytes;
  plan.partial_stats_offset =
      plan.partial_out_offset + align_up(static_cast<std::size_t>(plan.entries) *
                                         helixmla_tc::kLatent * sizeof(float));
  plan.workspace_bytes =
      plan.partial_stats_offset + align_up(static_cast<std::size_t>(plan.entries) * 2 * sizeof(float));
  return plan;
}

}  // namespace

// Each part is built on first use: a refresh that keeps its split counts
// needs only the row tiles and the histogram's candidates, and a remembered
// plan none of them.
struct TensorcoreSplitSearch::State {
  PhaseInputs in;
  std::int32_t slots = 1;
  std::optional<std::vector<Unit>> units;
  std::optional<TileHistogram> histogram;
  std::optional<std::vector<Candidate>> candidates;

  const std::vector<Unit>& row_tiles() {
    if (!units) units = units_of(in);
    return *units;
  }
  const TileHistogram& tile_histogram() {
    if (!histogram) histogram = histogram_of(row_tiles());
    return *histogram;
  }
  const std::vector<Candidate>& bounded() {
    if (!candidates) candidates = bounded_candidates(tile_histogram(), slots);
    return *candidates;
  }
  std::int64_t chunk() {
    if (row_tiles().empty()) return 1;
    // Four row tiles a slot balance without splitting.
    if (row_tiles().size() >= static_cast<std::size_t>(4) * slots) {
      return std::max<std::int64_t>(tile_histogram().longest(), 1);
    }
    return fastest_chunk(tile_histogram(), bounded(), slots);
  }
};

TensorcoreSplitSearch::TensorcoreSplitSearch(const Problem& phase, std::int32_t rows_tile,
                                             std::int32_t parallel_blocks)
    : state_(std::make_unique<State>()) {
  state_->in = inputs_of(phase, rows_tile, parallel_blocks);
  state_->slots = std::max(parallel_blocks, 1);
}

TensorcoreSplitSearch::~TensorcoreSplitSearch() = default;

TensorcorePlan TensorcoreSplitSearch::plan() const {
  const std::int64_t chunk = state_->chunk();
  const std::vector<Unit>& units = state_->row_tiles();
  std::vector<std::int32_t> splits;
  splits.reserve(units.size());
  for (const Unit& u : units) splits.push_back(static_cast<std::int32_t>(splits_for(u.tiles(), chunk)));
  return plan_with_splits(state_->in, units, std::move(splits));
}

std::optional<TensorcorePlan> TensorcoreSplitSearch::plan_keeping_splits(const TensorcorePlan& prepared) const {
  if (prepared.rows_tile != state_->in.rows_tile) return std::nullopt;
  const std::vector<Unit>& units = state_->row_tiles();
  std::vector<std::int32_t> rows;
  std::vector<std::int64_t> tiles;
  for (const Unit& u : units) {
    rows.push_back(u.rows);
    tiles.push_back(u.tiles());
  }
  std::optional<std::vector<std::int32_t>> splits =
      reassigned_splits(prepared.row_tile_rows, prepared.row_tile_splits, rows, tiles);
  if (!splits) return std::nullopt;
  return plan_with_splits(state_->in, units, std::move(*splits));
}

std::int64_t TensorcoreSplitSearch::finish_lower_bound() const {
  const std::vector<Candidate>& candidates = state_->bounded();
  return candidates.empty() ? 0 : candidates.front().bound;
}

std::shared_ptr<const TensorcorePlan> TensorcoreSplitSearch::plan_to_refresh(
    const TensorcorePlan& prepared, const std::function<bool(const TensorcorePlan&)>& launches_alike) const {
  const std::int32_t slots = state_->slots;
  std::optional<TensorcorePlan> kept = plan_keeping_splits(prepared);
  if (kept && !launches_alike(*kept)) kept.reset();
  const std::int64_t kept_finish = kept ? estimated_finish(*kept, slots) : 0;
  if (kept && keeping_splits_pays(kept_finish, finish_lower_bound())) {
    return std::make_shared<const TensorcorePlan>(std::move(*kept));
  }
  std::shared_ptr<const TensorcorePlan> best = tensorcore_plan_for(*this);
  if (launches_alike(*best)) return best;
  if (!kept || !keeping_splits_pays(kept_finish, estimated_finish(*best, slots))) return nullptr;
  return std::make_shared<const TensorcorePlan>(std::move(*kept));
}

std::int64_t estimated_finish(const TensorcorePlan& plan, std::int32_t parallel_blocks) {
  std::array<std::byte, 8192> buffer;
  std::pmr::monotonic_buffer_resource arena(buffer.data(), buffer.size());
  CostCounts costs(&arena);
  for (const helixmla_tc::WorkItem& item : plan.items) {
    costs[ceil_div(std::max(item.kv_end - item.kv_begin, 0), kTile) + kItemOverheadTiles] += 1;
  }
  return makespan(costs, std::max(parallel_blocks, 1), &arena) + (plan.segments.empty() ? 0 : kSplitLaunchTiles);
}

TensorcorePlan plan_tensorcore(const Problem& phase, std::int32_t rows_tile, std::int32_t parallel_blocks) {
  return TensorcoreSplitSearch(phase, rows_tile, parallel_blocks).plan();
}

namespace {

struct RememberedPlan {
  KeptInputs inputs;
  std::shared_ptr<const TensorcorePlan> plan;
};

RememberedPlan& remembered() {
  thread_local RememberedPlan last;
  return last;
}

}  // namespace

std::shared_ptr<const TensorcorePlan> tensorcore_plan_for(const TensorcoreSplitSearch& search) {
  RememberedPlan& last = remembered();
  const PhaseInputs& in = search.state_->in;
  if (last.plan && last.inputs == in) return last.plan;
  last.plan = std::make_shared<const TensorcorePlan>(search.plan());
  last.inputs = kept(in);
  return last.plan;
}

std::shared_ptr<const TensorcorePlan> tensorcore_plan_for(const Problem& phase, std::int32_t rows_tile,
                                                          std::int32_t parallel_blocks) {
  const RememberedPlan& last = remembered();
  if (last.plan && last.inputs == inputs_of(phase, rows_tile, parallel_blocks)) return last.plan;
  return tensorcore_plan_for(TensorcoreSplitSearch(phase, rows_tile, parallel_blocks));
}

}  // namespace helixmla::cuda

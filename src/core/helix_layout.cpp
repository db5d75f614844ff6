// Page and head ownership under Helix, and one rank's view of a batch.
#include <algorithm>
#include <string>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {

namespace {

void check_ranks(std::int32_t cp, std::int32_t rank) {
  if (cp < 1) throw InvalidArgument("cp_size", -1, std::to_string(cp), "must be at least 1");
  if (rank < 0 || rank >= cp) {
    throw InvalidArgument("cp_rank", -1, std::to_string(rank),
                          "must be in [0, cp_size = " + std::to_string(cp) + ")");
  }
}

void check_page_size(std::int32_t page_size) {
  if (page_size < 1) {
    throw InvalidArgument("page_size", -1, std::to_string(page_size), "must be at least 1");
  }
}

std::int64_t pages_for(std::int64_t tokens, std::int32_t page_size) {
  return (tokens + page_size - 1) / page_size;
}

// Pages among the first `pages` of a sequence that `rank` owns.
std::int64_t owned_pages(std::int64_t pages, std::int32_t cp, std::int32_t rank) {
  return pages / cp + (rank < pages % cp ? 1 : 0);
}

}  // namespace

HeadRange helix_heads_of_rank(std::int32_t heads, std::int32_t cp, std::int32_t rank) {
  check_ranks(cp, rank);
  if (heads < 0) throw InvalidArgument("num_heads", -1, std::to_string(heads), "must be >= 0");
  const std::int64_t begin = static_cast<std::int64_t>(rank) * heads / cp;
  const std::int64_t end = static_cast<std::int64_t>(rank + 1) * heads / cp;
  return {static_cast<std::int32_t>(begin), static_cast<std::int32_t>(end - begin)};
}

std::int64_t helix_owned_tokens(std::int64_t tokens, std::int32_t page_size, std::int32_t cp,
                                std::int32_t rank) {
  check_ranks(cp, rank);
  check_page_size(page_size);
  if (tokens <= 0) return 0;
  const std::int64_t full_pages = tokens / page_size;
  const std::int64_t tail = tokens % page_size;
  const std::int64_t tail_owned = helix_page_owner(full_pages, cp) == rank ? tail : 0;
  return owned_pages(full_pages, cp, rank) * page_size + tail_owned;
}

namespace {

// `request` is the request's index in the batch its lengths came from, for
// the error; -1 where the caller passed one request alone.
HelixRequestView localize_request(std::int32_t kv_len, std::int32_t q_len, std::span<const std::int32_t> global_row,
                                  std::int32_t page_size, std::int32_t cp, std::int32_t rank,
                                  std::int64_t request) {
  if (kv_len < 0) throw InvalidArgument("kv_len", request, std::to_string(kv_len), "must be >= 0");
  if (q_len < 0) throw InvalidArgument("q_len", request, std::to_string(q_len), "must be >= 0");
  const std::int64_t pages = pages_for(kv_len, page_size);
  if (static_cast<std::int64_t>(global_row.size()) < pages) {
    throw InvalidArgument("page_table_stride", -1, std::to_string(global_row.size()),
                          "a row needs ceil(kv_len / page_size) = " + std::to_string(pages) +
                              " entries");
  }
  HelixRequestView view;
  view.kv_len = static_cast<std::int32_t>(helix_owned_tokens(kv_len, page_size, cp, rank));
  for (std::int64_t b = rank; b < pages; b += cp) view.page_row.push_back(global_row[b]);
  view.token_bounds.reserve(static_cast<std::size_t>(q_len));
  for (std::int32_t t = 0; t < q_len; ++t) {
    const std::int64_t visible = visible_kv(kv_len, q_len, t);
    view.token_bounds.push_back(
        static_cast<std::int32_t>(helix_owned_tokens(visible, page_size, cp, rank)));
  }
  return view;
}

}  // namespace

HelixRequestView helix_localize_request(std::int32_t kv_len, std::int32_t q_len,
                                        std::span<const std::int32_t> global_row,
                                        std::int32_t page_size, std::int32_t cp,
                                        std::int32_t rank) {
  check_ranks(cp, rank);
  check_page_size(page_size);
  return localize_request(kv_len, q_len, global_row, page_size, cp, rank, -1);
}

HelixLocalMetadata helix_localize(const Problem& global, std::int32_t cp, std::int32_t rank) {
  check_ranks(cp, rank);
  check_page_size(global.kv.page_size);
  if (global.helix.cp_size > 1) {
    throw InvalidArgument("helix.cp_size", -1, std::to_string(global.helix.cp_size),
                          "the global batch must not already be Helix-split");
  }
  if (!global.helix.token_kv_bounds.empty()) {
    throw InvalidArgument("helix.token_kv_bounds", -1, std::to_string(global.helix.token_kv_bounds.size()) + " bounds",
                          "the global batch must not already be Helix-split");
  }
  const std::int32_t requests = global.num_requests();
  if (static_cast<std::int32_t>(global.kv_len.size()) != requests) {
    throw InvalidArgument("kv_len", -1, std::to_string(global.kv_len.size()),
                          "needs one entry per request (" + std::to_string(requests) + ")");
  }
  const std::int32_t stride = global.page_table_stride;
  if (stride < 0 ||
      static_cast<std::int64_t>(global.page_table.size()) <
          static_cast<std::int64_t>(requests) * stride) {
    throw InvalidArgument("page_table", -1, std::to_string(global.page_table.size()),
                          "needs num_requests * page_table_stride entries");
  }

  HelixLocalMetadata local;
  local.cp_size = cp;
  local.cp_rank = rank;
  local.q_len.assign(global.q_len.begin(), global.q_len.end());
  std::vector<HelixRequestView> views;
  views.reserve(static_cast<std::size_t>(requests));
  std::size_t local_stride = 1;
  for (std::int32_t r = 0; r < requests; ++r) {
    auto row = global.page_table.subspan(static_cast<std::size_t>(r) * stride,
                                         static_cast<std::size_t>(stride));
    views.push_back(localize_request(global.kv_len[r], global.q_len[r], row, global.kv.page_size, cp, rank, r));
    local_stride = std::max(local_stride, views.back().page_row.size());
  }
  local.page_table_stride = static_cast<std::int32_t>(local_stride);
  local.page_table.assign(static_cast<std::size_t>(requests) * local_stride, -1);
  for (std::int32_t r = 0; r < requests; ++r) {
    const HelixRequestView& view = views[static_cast<std::size_t>(r)];
    local.kv_len.push_back(view.kv_len);
    std::copy(view.page_row.begin(), view.page_row.end(),
              local.page_table.begin() + static_cast<std::ptrdiff_t>(r * local_stride));
    local.token_kv_bounds.insert(local.token_kv_bounds.end(), view.token_bounds.begin(),
                                 view.token_bounds.end());
  }
  return local;
}

Problem helix_local_problem(const Problem& global, const HelixLocalMetadata& local,
                            void* partial_out, float* partial_stats) {
  Problem p = global;
  p.q_len = local.q_len;
  p.kv_len = local.kv_len;
  p.page_table = local.page_table;
  p.page_table_stride = local.page_table_stride;
  p.helix.cp_size = local.cp_size;
  p.helix.cp_rank = local.cp_rank;
  p.helix.token_kv_bounds = local.token_kv_bounds;
  p.out = partial_out;
  p.stats.data = partial_stats;
  p.stats.dtype = DType::fp32;
  p.stats.tokens = p.num_tokens();
  p.stats.heads = global.num_heads;
  p.stats.width = 2;
  return p;
}

std::vector<std::int64_t> helix_kv_append_rows(std::span<const std::int32_t> q_len,
                                               std::span<const std::int32_t> kv_len,
                                               std::span<const std::int32_t> page_table,
                                               std::int32_t page_table_stride,
                                               std::int32_t page_size, std::int64_t num_pages,
                                               std::int32_t cp, std::int32_t rank) {
  check_ranks(cp, rank);
  check_page_size(page_size);
  if (kv_len.size() != q_len.size()) {
    throw InvalidArgument("kv_len", -1, std::to_string(kv_len.size()),
                          "needs one entry per request (" + std::to_string(q_len.size()) + ")");
  }
  std::vector<std::int64_t> rows;
  for (std::size_t r = 0; r < q_len.size(); ++r) {
    const auto index = static_cast<std::int64_t>(r);
    if (q_len[r] < 0) throw InvalidArgument("q_len", index, std::to_string(q_len[r]), "must be >= 0");
    if (kv_len[r] < 0) throw InvalidArgument("kv_len", index, std::to_string(kv_len[r]), "must be >= 0");
    if (q_len[r] > kv_len[r]) {
      throw InvalidArgument("q_len", index, std::to_string(q_len[r]),
                            "new tokens must not exceed kv_len = " + std::to_string(kv_len[r]));
    }
    for (std::int32_t t = 0; t < q_len[r]; ++t) {
      const std::int64_t position = static_cast<std::int64_t>(kv_len[r]) - q_len[r] + t;
      const std::int64_t page = position / page_size;
      if (helix_page_owner(page, cp) != rank) {
        rows.push_back(-1);
        continue;
      }
      if (page >= page_table_stride) {
        throw InvalidArgument("page_table_stride", -1, std::to_string(page_table_stride),
                              "request " + std::to_string(r) + " needs page " +
                                  std::to_string(page));
      }
      const std::int64_t slot = index * page_table_stride + page;
      if (slot >= static_cast<std::int64_t>(page_table.size())) {
        throw InvalidArgument("page_table", slot, "<missing>",
                              "needs num_requests * page_table_stride entries");
      }
      const std::int32_t physical = page_table[static_cast<std::size_t>(slot)];
      if (physical < 0 || physical >= num_pages) {
        throw InvalidArgument("page_table", slot, std::to_string(physical),
                              "must name a page of the pool [0, " + std::to_string(num_pages) +
                                  ")");
      }
      rows.push_back(static_cast<std::int64_t>(physical) * page_size + position % page_size);
    }
  }
  return rows;
}

}  // namespace helixmla

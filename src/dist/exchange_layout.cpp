// Byte layout of the Helix exchange buffers, the checks every transport
// makes on its arguments, and the host repacking of a rank's attention
// output into the buffers (the device twin is src/cuda/helix_pack.cu).
#include <cstring>
#include <string>

#include "dist/exchange.hpp"
#include "helixmla/error.hpp"

namespace helixmla::dist {

namespace {
constexpr std::size_t kStatsRowBytes = 2 * sizeof(float);

std::size_t size(std::int64_t value) { return static_cast<std::size_t>(value); }
}  // namespace

std::size_t ExchangeShape::send_partial_offset(std::int32_t peer) const {
  return size(tokens) * size(heads_of(peer).begin) * size(width) * element_bytes();
}
std::size_t ExchangeShape::send_stats_offset(std::int32_t peer) const {
  return size(tokens) * size(heads_of(peer).begin) * kStatsRowBytes;
}
std::size_t ExchangeShape::partial_chunk_bytes(std::int32_t owner) const {
  return size(tokens) * size(heads_of(owner).count) * size(width) * element_bytes();
}
std::size_t ExchangeShape::stats_chunk_bytes(std::int32_t owner) const {
  return size(tokens) * size(heads_of(owner).count) * kStatsRowBytes;
}
std::size_t ExchangeShape::send_partial_bytes() const {
  return size(tokens) * size(heads) * size(width) * element_bytes();
}
std::size_t ExchangeShape::send_stats_bytes() const {
  return size(tokens) * size(heads) * kStatsRowBytes;
}
std::size_t ExchangeShape::recv_partial_bytes(std::int32_t rank) const {
  return size(cp) * partial_chunk_bytes(rank);
}
std::size_t ExchangeShape::recv_stats_bytes(std::int32_t rank) const {
  return size(cp) * stats_chunk_bytes(rank);
}

void check_exchange_size(const ExchangeShape& shape, std::int32_t cp) {
  if (shape.cp != cp) {
    throw InvalidArgument("shape.cp", -1, std::to_string(shape.cp),
                          "must equal the exchange's size " + std::to_string(cp));
  }
}

std::vector<const RankBuffers*> every_rank_once(std::int32_t cp, std::span<const RankBuffers> ranks,
                                                std::string_view who) {
  std::vector<const RankBuffers*> table(size(cp), nullptr);
  for (const RankBuffers& b : ranks) {
    if (b.rank < 0 || b.rank >= cp || table[size(b.rank)] != nullptr) {
      throw InvalidArgument("ranks", b.rank, std::to_string(b.rank), "each rank in [0, cp) appears at most once");
    }
    table[size(b.rank)] = &b;
  }
  for (std::int32_t r = 0; r < cp; ++r) {
    if (table[size(r)] == nullptr) {
      throw InvalidArgument("ranks", r, "missing",
                            std::string(who) + " needs every rank's buffers in the same call");
    }
  }
  return table;
}

void pack_send_host(const ExchangeShape& shape, const RankBuffers& b) {
  const std::size_t head_bytes = size(shape.width) * shape.element_bytes();
  const auto* src = static_cast<const std::byte*>(b.partial);
  const auto* src_stats = reinterpret_cast<const std::byte*>(b.partial_stats);
  for (std::int32_t peer = 0; peer < shape.cp; ++peer) {
    const HeadRange h = shape.heads_of(peer);
    if (h.count == 0) continue;
    std::byte* chunk;
    std::byte* stats_chunk;
    if (peer == b.rank) {
      chunk = static_cast<std::byte*>(b.recv_partial) + size(b.rank) * shape.partial_chunk_bytes(peer);
      stats_chunk = reinterpret_cast<std::byte*>(b.recv_stats) + size(b.rank) * shape.stats_chunk_bytes(peer);
    } else {
      chunk = static_cast<std::byte*>(b.send_partial) + shape.send_partial_offset(peer);
      stats_chunk = reinterpret_cast<std::byte*>(b.send_stats) + shape.send_stats_offset(peer);
    }
    for (std::int64_t t = 0; t < shape.tokens; ++t) {
      const std::size_t row = size(t) * size(shape.heads) + size(h.begin);
      std::memcpy(chunk + size(t) * size(h.count) * head_bytes, src + row * head_bytes,
                  size(h.count) * head_bytes);
      std::memcpy(stats_chunk + size(t) * size(h.count) * kStatsRowBytes,
                  src_stats + row * kStatsRowBytes, size(h.count) * kStatsRowBytes);
    }
  }
}

}  // namespace helixmla::dist

#include "helixmla/backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#include "helixmla/error.hpp"

namespace helixmla {

namespace {

std::string_view to_string(PhaseKind kind) {
  return kind == PhaseKind::context ? "context" : "generation";
}

std::string_view to_string(MaskKind mask) {
  switch (mask) {
    case MaskKind::linear: return "linear";
    case MaskKind::tree: return "tree";
    case MaskKind::custom: return "custom";
  }
  return "unknown";
}

// splitmix64 finaliser: cheap, and every input bit reaches every output bit,
// which keeps neighbouring shapes (heads 47 vs 48) in different buckets.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::size_t hash_value(const PhaseShape& s) {
  const auto u = [](auto v) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(v)); };
  const std::uint64_t dtypes = u(s.q_dtype) | u(s.kv_dtype) << 8 | u(s.out_dtype) << 16 |
                               u(s.phase) << 24 | u(s.mask) << 32 | u(s.batch_has_generations) << 40 |
                               u(s.helix) << 41 | u(s.has_stats) << 42 |
                               u(s.stats_fp32_contiguous) << 43 | u(s.on_device) << 44;
  std::uint64_t h = mix(dtypes);
  h = mix(h ^ (u(s.dims.kv_lora_rank) | u(s.dims.rope_dim) << 32));
  h = mix(h ^ (u(s.num_heads) | u(s.page_size) << 32));
  h = mix(h ^ (u(s.q_len) | u(s.max_q_len) << 32));
  h = mix(h ^ (u(s.batch_bucket) | u(s.cp_size) << 32));
  h = mix(h ^ u(s.beam_width));
  h = mix(h ^ (u(s.alignment.q) | u(s.alignment.kv_pool) << 8 | u(s.alignment.out) << 16 |
               u(s.alignment.stats) << 24));
  return static_cast<std::size_t>(h);
}

std::string describe(const PhaseShape& s) {
  std::string text = fmt::format("{} H={} q_len={}", to_string(s.phase), s.num_heads,
                                 s.q_len > 0 ? std::to_string(s.q_len) : "varies");
  if (s.q_len != s.max_q_len) text += fmt::format(" max_q_len<={}", s.max_q_len);
  text += fmt::format(" page={} kv={} q={} out={} batch>={}", s.page_size, to_string(s.kv_dtype),
                      to_string(s.q_dtype), to_string(s.out_dtype), s.batch_bucket);
  if (s.helix) text += fmt::format(" helix cp={}", s.cp_size);
  if (s.has_stats) text += s.stats_fp32_contiguous ? " stats=fp32[tokens,H,2]" : " stats=other-layout";
  if (!s.batch_has_generations) text += " no-generations-in-batch";
  if (s.beam_width != 1) text += fmt::format(" beam={}", s.beam_width);
  if (s.mask != MaskKind::linear) text += fmt::format(" mask={}", to_string(s.mask));
  if (s.dims.kv_lora_rank != 512 || s.dims.rope_dim != 64) {
    text += fmt::format(" dims={}+{}", s.dims.kv_lora_rank, s.dims.rope_dim);
  }
  if (s.alignment != AddressAlignment{}) {
    text += fmt::format(" aligned q={} pool={} out={} stats={}", s.alignment.q, s.alignment.kv_pool,
                        s.alignment.out, s.alignment.stats);
  }
  text += s.on_device ? " device" : " host";
  return text;
}

std::int32_t batch_bucket_of(std::int64_t requests) {
  if (requests <= 1) return 1;
  return static_cast<std::int32_t>(std::bit_floor(static_cast<std::uint64_t>(requests)));
}

std::int32_t max_q_len_bucket_of(std::int64_t longest_q_len) {
  if (longest_q_len <= 1) return 1;
  // Past 2^30 the next power of two is 2^31, which int32 cannot hold; the
  // largest int32 still bounds the real length from above, which is what
  // backends that size rows from the bucket rely on.
  constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
  return static_cast<std::int32_t>(
      std::min<std::uint64_t>(std::bit_ceil(static_cast<std::uint64_t>(longest_q_len)), kInt32Max));
}

PhaseShape shape_of(const Phase& phase, const Problem& whole) {
  const Problem& part = phase.problem;
  PhaseShape shape;
  shape.phase = phase.kind;
  shape.dims = part.dims;
  shape.num_heads = part.num_heads;
  shape.q_dtype = part.q_dtype;
  shape.kv_dtype = part.kv.dtype;
  shape.out_dtype = part.out_dtype;
  shape.page_size = part.kv.page_size;

  std::int32_t longest = 0;
  bool uniform = true;
  for (std::int32_t s : part.q_len) {
    uniform = uniform && s == part.q_len.front();
    longest = std::max(longest, s);
  }
  // Context lengths differ from step to step; keeping them out of the key
  // (only their power-of-two bucket counts) keeps the selector cache bounded.
  shape.q_len = phase.kind == PhaseKind::generation && uniform ? longest : 0;
  shape.max_q_len = max_q_len_bucket_of(longest);
  shape.batch_bucket = batch_bucket_of(part.num_requests());
  shape.batch_has_generations = whole.num_generations() > 0;
  shape.helix = whole.helix.enabled();
  shape.cp_size = whole.helix.cp_size;
  shape.has_stats = part.stats.present();
  shape.stats_fp32_contiguous = !shape.has_stats || (part.stats.dtype == DType::fp32 &&
                                                     part.stats.width == 2 &&
                                                     part.stats.heads == part.num_heads);
  shape.on_device = part.location.kind == Location::Kind::cuda;
  const auto alignment_of = [](const void* pointer) {
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(pointer);
    return address == 0 ? 16 : static_cast<std::int32_t>(std::min<std::uintptr_t>(16, address & (~address + 1)));
  };
  shape.alignment = {alignment_of(part.q), alignment_of(part.kv.pool), alignment_of(part.out),
                     alignment_of(part.stats.data)};
  return shape;
}

PreparedRun::Refresh PreparedRun::plan_refresh(const Problem&) { return {}; }

void PreparedRun::check_layer(const LayerTensors&) const {}

std::size_t Backend::workspace_bytes(const Problem&) const { return 0; }

std::unique_ptr<PreparedRun> Backend::prepare(const Problem&, Workspace, void*) const {
  throw NoCapableBackend(fmt::format("backend {} is profile-only/not executable", name()));
}

}  // namespace helixmla

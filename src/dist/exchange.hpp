// The Helix exchange (DESIGN §5): an all-to-all over heads between the cp
// ranks of one sequence group. Every rank holds partial outputs of all H
// heads; afterwards each rank holds every rank's partials of its own heads
// (helix_heads_of_rank), ready for the combine.
//
// Buffers of rank r (elements of `partial_dtype`, stats float32):
//   send partial [peer][tokens, heads_of(peer), width]  (peer chunks back to back)
//   send stats   [peer][tokens, heads_of(peer), 2]
//   recv partial [source, tokens, heads_of(r), width]
//   recv stats   [source, tokens, heads_of(r), 2]
// so every peer's chunk is contiguous and the receive side is exactly the
// combine's input. With H divisible by cp this is [peer, tokens, H/cp, width].
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "helixmla/dtype.hpp"
#include "helixmla/helix.hpp"
#include "helixmla/problem.hpp"

namespace helixmla::dist {

struct ExchangeShape {
  std::int32_t cp = 1;
  std::int64_t tokens = 0;
  std::int32_t heads = 0;    // all heads (H)
  std::int32_t width = 512;  // kv_lora_rank
  DType partial_dtype = DType::bf16;

  HeadRange heads_of(std::int32_t rank) const { return helix_heads_of_rank(heads, cp, rank); }
  std::size_t element_bytes() const { return dtype_size(partial_dtype); }
  // Byte offsets and sizes.
  std::size_t send_partial_offset(std::int32_t peer) const;
  std::size_t send_stats_offset(std::int32_t peer) const;
  std::size_t partial_chunk_bytes(std::int32_t owner) const;  // one source's chunk for `owner`
  std::size_t stats_chunk_bytes(std::int32_t owner) const;
  std::size_t send_partial_bytes() const;  // whole send buffer (= partial output)
  std::size_t send_stats_bytes() const;
  std::size_t recv_partial_bytes(std::int32_t rank) const;
  std::size_t recv_stats_bytes(std::int32_t rank) const;
};

// One local rank's side of an exchange: its attention output, staging for
// transports that send packed chunks, and its receive buffers. `stream` is
// the rank's cudaStream_t for device exchanges and ignored on the host.
// Transports deliver the rank's own chunk by packing it straight into its
// receive slot, so only chunks for other ranks travel.
struct RankBuffers {
  std::int32_t rank = 0;
  const void* partial = nullptr;        // attention output [tokens, H, width]
  const float* partial_stats = nullptr;  // [tokens, H, 2]
  void* send_partial = nullptr;          // staging, layout above (unused by some transports)
  float* send_stats = nullptr;
  void* recv_partial = nullptr;
  float* recv_stats = nullptr;
  void* stream = nullptr;
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual std::string_view name() const = 0;
  virtual std::int32_t size() const = 0;  // cp
  // The ranks this process drives (all of them in process, one per process
  // with one-process-per-GPU NCCL).
  virtual std::vector<std::int32_t> local_ranks() const = 0;
  // Whether all_to_all uses RankBuffers::send_partial / send_stats; when
  // not, callers need not allocate them.
  virtual bool uses_send_staging() const { return true; }
  // Performs (host) or enqueues (device) the all-to-all for the given local
  // ranks, from their attention outputs to their receive buffers; normally
  // every local rank at once. Device exchanges do not wait for the host.
  virtual void all_to_all(const ExchangeShape& shape, std::span<const RankBuffers> ranks) = 0;
  // Blocks until every stream has finished the work enqueued on it so far.
  // Throws RuntimeFailure on a transport error or when a peer does not answer
  // within the exchange's timeout; it never hangs.
  virtual void wait(std::span<void* const> streams) = 0;
};

// In-process ranks: host buffers (`where` host) or device buffers on one
// GPU (`where` cuda(d), cudaMemcpyAsync on the receiving rank's stream, with
// events ordering it after every sender's stream when streams differ).
std::unique_ptr<Exchange> make_in_process_exchange(std::int32_t cp, Location where);

// Checks every transport makes on entry to all_to_all, with the
// InvalidArgument naming the field: `shape.cp` must be the exchange's size
// `cp`; and, for transports that need all ranks in one call, each rank in
// [0, cp) exactly once (the result indexes the buffers by rank; `who` names
// the exchange in the message).
void check_exchange_size(const ExchangeShape& shape, std::int32_t cp);
std::vector<const RankBuffers*> every_rank_once(std::int32_t cp, std::span<const RankBuffers> ranks,
                                                std::string_view who);

// Repacks a rank's attention output (`b.partial`, `b.partial_stats`) into
// its send buffers, except its own heads, which go straight into its receive
// slot (`b.rank`).
void pack_send_host(const ExchangeShape& shape, const RankBuffers& b);
#if defined(HELIXMLA_WITH_CUDA)
// Device twin: one kernel on `b.stream` for every peer, partials and stats.
void pack_send_device(const ExchangeShape& shape, const RankBuffers& b);
#endif

}  // namespace helixmla::dist

// What the multi-GPU tests share: the exchange buffers of one rank filled
// with tagged partials, the Kimi K3 TP2/CP4 local shape, and a Helix step
// with one rank per GPU checked against the reference.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "device_batch.hpp"
#include "dist/exchange.hpp"
#include "dist/helix_driver.hpp"
#include "support/gpu_skip.hpp"
#include "support/helix_step.hpp"

namespace helixmla::testing {

// fp32 partials whose values name (source rank, token, head, column).
float exchange_tag(std::int32_t source, std::int64_t token, std::int32_t head, std::int32_t k);

// One rank's exchange buffers on its device: the attention output filled
// with the tags of source rank + tag_offset, send staging and receive
// buffers poisoned (0xff bytes).
struct RankSide {
  DeviceBuffer partial, stats, send, send_stats, recv, recv_stats;
  cudaStream_t stream = nullptr;

  RankSide(const dist::ExchangeShape& shape, std::int32_t rank, int device, std::int32_t tag_offset = 0);
  ~RankSide();
  RankSide(const RankSide&) = delete;
  RankSide& operator=(const RankSide&) = delete;

  dist::RankBuffers buffers(std::int32_t rank) const;
  // Checks what `rank` received against the tags every source sent it.
  void expect_received(const dist::ExchangeShape& shape, std::int32_t rank, std::int32_t tag_offset = 0) const;
};

// Checks receive buffers of `rank` against the tags of every source + tag_offset.
void expect_received_tags(const DeviceBuffer& recv, const DeviceBuffer& recv_stats, const dist::ExchangeShape& shape,
                          std::int32_t rank, std::int32_t tag_offset);

// One all-to-all of tagged partials between ranks 0 and 1 on GPUs 0 and 1
// through `exchange`, every received chunk checked against its tags.
void expect_exchange_delivers(dist::Exchange& exchange, const dist::ExchangeShape& shape);

// Exchanges queued back to back on the same streams with no host wait in
// between: A, a copy of the receive buffers behind it (a consumer), then B
// twice in a row (an exchange right behind another). The copy must hold A's
// tags and the receive buffers B's: no exchange writes into a slot before
// the work queued ahead of it on its owner's stream has read it, and the
// per-launch epochs stay in step.
void expect_back_to_back_exchanges(dist::Exchange& exchange, const dist::ExchangeShape& shape);

// The Kimi K3 TP2/CP4 local shape (48 heads, 64-token pages), one rank per
// GPU, with requests whose KV leaves some ranks empty.
HelixStepCase kimi_local_case(std::string name, std::int32_t q_len, DType kv_dtype, std::int32_t cp = 2);

// Case `c` as one Helix step with rank r on GPU r (`mode` nccl or peer),
// checked against the float64 reference, then three whole-step CUDA graph
// replays of the same buffers, each poisoned first and checked again.
// Prints the phase times.
void expect_multi_gpu_step_matches(dist::HelixMode mode, const HelixStepCase& c, std::uint64_t seed);

}  // namespace helixmla::testing

// The Helix exchange between GPUs of one process that reach each other's
// memory (peer access over NVLink): one kernel per GPU writes every row
// straight into its owner's receive buffer and trades flags with the same
// block on every peer (protocol in src/cuda/peer_exchange_kernel.hpp). It
// replaces the pack kernel and NCCL's send/receive kernel of a decode step
// with one launch; NCCL (nccl_exchange.hpp) remains the transport for one
// process per GPU and for GPUs without peer access.
//
// Faults: a peer that does not reach the exchange within the timeout
// (HELIXMLA_EXCHANGE_TIMEOUT_MS, default 30000) makes the waiting kernels
// give up and flag it; `wait` then throws RuntimeFailure, and the exchange
// refuses further use (the ranks' step counts no longer agree).
#pragma once

#include <chrono>
#include <memory>
#include <span>

#include "dist/exchange.hpp"

namespace helixmla::dist {

struct PeerOptions {
  std::chrono::milliseconds timeout{30000};
  // HELIXMLA_EXCHANGE_TIMEOUT_MS when set, else 30 s.
  static PeerOptions from_environment();
};

// Whether make_peer_exchange would take `devices`: at most 8, distinct, every
// pair with peer access (false without CUDA).
bool peer_exchange_possible(std::span<const int> devices);

// Rank r on devices[r]; enables peer access between every pair. Throws
// InvalidArgument naming the pair when one cannot reach the other, or when
// there are more ranks than the kernel's limit (8).
std::unique_ptr<Exchange> make_peer_exchange(std::span<const int> devices, const PeerOptions& options);

}  // namespace helixmla::dist

// The Helix all-to-all as one kernel per GPU for ranks that share a process
// and reach each other's memory over NVLink (peer access): every block packs
// its rows straight into the owning rank's receive slot with ordinary stores,
// then trades per-block flags with the same block of every peer. Host side:
// src/dist/peer_exchange.cpp.
//
// Protocol of block b of rank r at epoch e (its own launch count, equal on
// every rank because every rank launches the same grid each step):
//   1. tell every peer "ready for e" (peer.ready[r][b] = e): r's previous
//      combine, earlier on r's stream, has finished reading its slots;
//   2. wait for every peer's "ready for e", so no write lands in a slot that
//      a peer's previous combine may still read;
//   3. write this block's rows (and stats) into their owners' slot r;
//   4. fence (system scope), then peer.done[r][b] = e with release semantics;
//   5. wait for every peer's "done e" with acquire semantics: afterwards all
//      rows of block b from every source are in r's receive buffer.
// The kernel is launched early (programmatic dependent launch): steps 1-2
// overlap the end of the kernel that wrote the partials, which the kernel
// waits for before step 3. This relies on every kernel before that one
// having finished, as it does when they are ordinary launches.
// The kernel lets the next one launch early only after every block has
// stored its epoch, so an exchange right behind another reads the new one.
// Waits give up after `timeout_ns` (global timer): the block sets the device
// error word of every rank (every waiting block of every rank then gives
// up, and a rank that arrives late writes nothing) and this rank's
// host-visible `host_error`; the host reports it and refuses further use
// (the epochs no longer agree).
#pragma once

#include <cstdint>

namespace helixmla::dist::peer {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 128;

// One rank's flags, in its own device memory; peers write ready/done.
struct Flags {
  std::uint32_t ready[kMaxRanks][kMaxBlocks];  // [source][block]
  std::uint32_t done[kMaxRanks][kMaxBlocks];
  std::uint32_t epoch[kMaxBlocks];  // this rank's launches so far, per block
  std::uint32_t error;              // non-zero once a wait timed out
};

struct Links {
  std::int32_t cp = 0;
  std::int32_t rank = 0;
  void* recv_partial[kMaxRanks] = {};  // every rank's receive buffer (peer pointers)
  float* recv_stats[kMaxRanks] = {};
  Flags* flags[kMaxRanks] = {};
  std::uint32_t* host_error = nullptr;  // this rank's, in mapped pinned host memory
};

struct Rows {
  std::int64_t tokens = 0;
  std::int32_t heads = 0;     // all heads (H)
  std::int64_t row_bytes = 0;  // one head's partial: width * element size
};

// Enqueues rank `links.rank`'s kernel on `stream` (current device = its GPU).
void launch(const Links& links, const Rows& rows, const void* partial, const float* stats,
            std::uint64_t timeout_ns, void* stream);

}  // namespace helixmla::dist::peer

// The Helix all-to-all as one kernel per GPU for ranks that share a process
// and reach each other's memory over NVLink (peer access). Rows for another
// rank travel as 8-byte words, 4 bytes of data and the 4-byte epoch of the
// step (the idea of NCCL's LL protocol): an aligned 8-byte store lands
// whole, so a word that carries this step's epoch is this step's data, with
// no fence or completion flag behind the data. Host side:
// src/dist/peer_exchange.cpp.
//
// Step e of rank r (e = r's launches so far + 1; every rank launches once
// per step, so e agrees across ranks):
//   1. block b tells every peer "ready for e" (peer.ready[r][b] = e): r's
//      previous launch and the combine after it are done with r's buffers;
//   2. it waits for every peer's "ready for e" from their block b, so no
//      word lands in a buffer that peer still reads;
//   3. it writes its rows b, b + G, ... of [tokens, H]: rows of r's own heads
//      straight into r's receive slot r, rows of peer p's heads as tagged
//      words into p's landing area [source r][row];
//   4. it polls the landing words of its rows of r's heads from every source
//      until they carry e, and unpacks them into receive slot `source`.
// Row (t, h) is handled by block (t * H + h) mod G on every rank, so block b
// waits only on the peers' blocks b. The last block to finish advances the
// epoch, so every block of a launch tags with the same e and an older word
// (an earlier e, whichever block wrote it) never passes for a new one.
//
// The kernel is launched early (programmatic dependent launch): steps 1-2
// overlap the end of the kernel that wrote the partials, which the kernel
// waits for before step 3. This relies on every kernel before that one
// having finished, as it does when they are ordinary launches.
// Waits give up after `timeout_ns` (global timer): the block sets its rank's
// device error word (every other waiting block of the rank then gives up at
// once) and the host-visible `host_error`, and stops; the host reports it and
// refuses further use (the ranks' epochs no longer agree).
#pragma once

#include <cstdint>

namespace helixmla::dist::peer {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 128;

// One rank's flags, in its own device memory; peers write `ready`.
struct Flags {
  std::uint32_t ready[kMaxRanks][kMaxBlocks];  // [source][block]
  std::uint32_t launches;  // this rank's completed launches (the last epoch)
  std::uint32_t finished;  // blocks of the current launch that are done
  std::uint32_t error;     // non-zero once a wait timed out
};

struct Links {
  std::int32_t cp = 0;
  std::int32_t rank = 0;
  void* recv_partial[kMaxRanks] = {};  // every rank's receive buffer (peer pointers)
  float* recv_stats[kMaxRanks] = {};
  std::uint64_t* landing[kMaxRanks] = {};  // every rank's landing area
  Flags* flags[kMaxRanks] = {};
  std::uint32_t* host_error = nullptr;  // this rank's, in mapped pinned host memory
};

struct Rows {
  std::int64_t tokens = 0;
  std::int32_t heads = 0;      // all heads (H)
  std::int64_t row_bytes = 0;  // one head's partial: width * element size, a multiple of 4
};

// Words of one row in a landing area: the partial's 4-byte words, then m and l.
constexpr std::int64_t landing_row_words(const Rows& rows) { return rows.row_bytes / 4 + 2; }

// Blocks every rank launches for this shape (the same on every rank).
int grid_blocks(const Rows& rows);

// Enqueues rank `links.rank`'s kernel on `stream` (current device = its GPU).
void launch(const Links& links, const Rows& rows, const void* partial, const float* stats,
            std::uint64_t timeout_ns, void* stream);

}  // namespace helixmla::dist::peer

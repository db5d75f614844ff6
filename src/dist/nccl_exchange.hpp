// The Helix exchange over NCCL: grouped ncclSend/ncclRecv between the cp
// ranks, with non-blocking communicators so that an NCCL error or a peer that
// never arrives ends in RuntimeFailure within a timeout instead of a hang.
//
// Two ways to build the communicators:
//
// 1. One process drives every GPU (`make_nccl_exchange(devices, ...)`):
//    rank r runs on devices[r].
//
// 2. One process per GPU (`make_nccl_exchange(NcclProcessInfo, ...)`). The
//    NCCL unique id travels one of two ways:
//    - HELIXMLA_NCCL_ID=<hex>: the launcher creates it once (for example with
//      `nccl_unique_id_hex()`) and exports it to every rank;
//    - HELIXMLA_NCCL_ID_FILE=<path>: rank 0 creates it and writes the file
//      atomically, the other ranks wait for the file (up to the timeout) and
//      rank 0 removes it once the communicator is up. Use a fresh path per
//      job (for example one containing the job id) so no rank reads a stale id.
//    Rank, world size and device come from the first variable set of:
//      rank:   HELIXMLA_RANK, OMPI_COMM_WORLD_RANK (mpirun), PMI_RANK, PMIX_RANK,
//              SLURM_PROCID, RANK (torchrun)
//      size:   HELIXMLA_WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS,
//              WORLD_SIZE (torchrun)
//      device: HELIXMLA_DEVICE, LOCAL_RANK (torchrun), OMPI_COMM_WORLD_LOCAL_RANK,
//              MPI_LOCALRANKID, SLURM_LOCALID, else the rank
//    e.g.  mpirun -np 2 -x HELIXMLA_NCCL_ID_FILE=/tmp/helix-$JOB.id prog
//          torchrun --nproc-per-node 2 prog   (with HELIXMLA_NCCL_ID_FILE exported)
//
// Faults: every NCCL call is followed by polling ncclCommGetAsyncError, and
// `wait` polls the streams; past HELIXMLA_NCCL_TIMEOUT_MS (default 30000) or
// on an error the communicators are aborted (ncclCommAbort) and RuntimeFailure
// is thrown. An aborted exchange refuses further use.
//
// NVLink SHARP (multicast objects) stays off: NCCL_NVLS_ENABLE is set to 0
// before any communicator is created unless the caller already set it.
#pragma once

#if defined(HELIXMLA_WITH_NCCL)

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "dist/exchange.hpp"

namespace helixmla::dist {

struct NcclOptions {
  std::chrono::milliseconds timeout{30000};
  // HELIXMLA_NCCL_TIMEOUT_MS when set, else 30 s.
  static NcclOptions from_environment();
};

struct NcclProcessInfo {
  std::int32_t rank = 0;
  std::int32_t size = 1;
  int device = 0;
  std::string id_hex;   // HELIXMLA_NCCL_ID
  std::string id_file;  // HELIXMLA_NCCL_ID_FILE
  // Throws InvalidArgument naming the variable when one is malformed.
  static NcclProcessInfo from_environment();
};

// A fresh NCCL unique id as hex, for launchers that export HELIXMLA_NCCL_ID.
std::string nccl_unique_id_hex();

std::unique_ptr<Exchange> make_nccl_exchange(std::span<const int> devices,
                                             const NcclOptions& options);
std::unique_ptr<Exchange> make_nccl_exchange(const NcclProcessInfo& process,
                                             const NcclOptions& options);

}  // namespace helixmla::dist

#endif

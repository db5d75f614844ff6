// NCCL implementation of the Helix exchange (see nccl_exchange.hpp).
#include "dist/nccl_exchange.hpp"

#include "core/env_integer.hpp"
#include "dist/stream_wait.hpp"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "helixmla/error.hpp"

namespace helixmla::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::microseconds(50);

const char* first_set(std::initializer_list<const char*> names, const char** which = nullptr) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      if (which != nullptr) *which = name;
      return value;
    }
  }
  return nullptr;
}

void keep_nvls_off() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  std::string message = ncclGetErrorString(result);
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0') {
    message += " (";
    message += last;
    message += ")";
  }
  return message;
}

std::string to_hex(const ncclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

ncclUniqueId from_hex(const std::string& hex, const char* source) {
  ncclUniqueId id{};
  if (hex.size() != 2 * sizeof(id.internal)) {
    throw InvalidArgument(source, -1, std::to_string(hex.size()) + " hex digits",
                          "an NCCL unique id is " + std::to_string(2 * sizeof(id.internal)) +
                              " hex digits");
  }
  for (std::size_t i = 0; i < sizeof(id.internal); ++i) {
    const std::string pair = hex.substr(2 * i, 2);
    char* end = nullptr;
    const long byte = std::strtol(pair.c_str(), &end, 16);
    if (end != pair.c_str() + 2) {
      throw InvalidArgument(source, static_cast<std::int64_t>(2 * i), pair, "is not hex");
    }
    id.internal[i] = static_cast<char>(byte);
  }
  return id;
}

ncclUniqueId new_unique_id() {
  keep_nvls_off();
  ncclUniqueId id{};
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    throw RuntimeFailure("ncclGetUniqueId failed: " + nccl_message(r, nullptr));
  }
  return id;
}

ncclUniqueId id_through_file(const NcclProcessInfo& process, Clock::time_point deadline) {
  if (process.rank == 0) {
    const ncclUniqueId id = new_unique_id();
    const std::string temporary = process.id_file + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream file(temporary, std::ios::trunc);
      file << to_hex(id);
      if (!file) throw RuntimeFailure("cannot write the NCCL id to " + temporary);
    }
    if (std::rename(temporary.c_str(), process.id_file.c_str()) != 0) {
      throw RuntimeFailure("cannot move the NCCL id into " + process.id_file);
    }
    return id;
  }
  const std::size_t digits = 2 * sizeof(ncclUniqueId::internal);
  while (true) {
    std::ifstream file(process.id_file);
    std::string hex;
    if (file >> hex && hex.size() == digits) return from_hex(hex, "HELIXMLA_NCCL_ID_FILE");
    if (Clock::now() > deadline) {
      throw RuntimeFailure("rank " + std::to_string(process.rank) + ": no NCCL id appeared in " +
                           process.id_file + " before the timeout (is rank 0 running?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class NcclExchange final : public Exchange {
 public:
  NcclExchange(std::int32_t size, std::vector<std::int32_t> ranks, std::vector<int> devices,
               NcclOptions options)
      : size_(size), ranks_(std::move(ranks)), devices_(std::move(devices)),
        options_(options), comms_(ranks_.size(), nullptr) {}

  ~NcclExchange() override { shut_down(); }

  // Creates this process's communicators (one per local rank) in one group.
  void connect(const ncclUniqueId& id) {
    keep_nvls_off();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const auto deadline = Clock::now() + options_.timeout;
    std::string failure;
    // Nothing between ncclGroupStart and ncclGroupEnd may throw: a group left
    // open swallows every later NCCL call of this thread.
    ncclGroupStart();
    for (std::size_t i = 0; i < ranks_.size() && failure.empty(); ++i) {
      if (const cudaError_t e = cudaSetDevice(devices_[i]); e != cudaSuccess) {
        failure = "cudaSetDevice(" + std::to_string(devices_[i]) + "): " + cudaGetErrorString(e);
        break;
      }
      const ncclResult_t r = ncclCommInitRankConfig(&comms_[i], size_, id, ranks_[i], &config);
      if (r != ncclSuccess && r != ncclInProgress && failure.empty()) {
        failure = "ncclCommInitRankConfig(rank " + std::to_string(ranks_[i]) +
                  "): " + nccl_message(r, nullptr);
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess && end != ncclInProgress && failure.empty()) {
      failure = "ncclGroupEnd after communicator creation: " + nccl_message(end, nullptr);
    }
    if (!failure.empty()) fail(failure);
    settle("creating the communicators (waiting for every rank to join)", deadline);
  }

  std::string_view name() const override { return "nccl"; }
  std::int32_t size() const override { return size_; }
  std::vector<std::int32_t> local_ranks() const override { return ranks_; }

  void all_to_all(const ExchangeShape& shape, std::span<const RankBuffers> ranks) override {
    usable();
    check_exchange_size(shape, size_);
    const auto deadline = Clock::now() + options_.timeout;
    std::string failure;
    auto note = [&](ncclResult_t r, const char* what, std::int32_t rank, std::int32_t peer) {
      if (r != ncclSuccess && r != ncclInProgress && failure.empty()) {
        failure = std::string(what) + " (rank " + std::to_string(rank) + ", peer " +
                  std::to_string(peer) + "): " + nccl_message(r, nullptr);
      }
    };
    // Communicators resolved and send buffers packed before the group
    // opens: nothing inside it may throw.
    std::vector<ncclComm_t> comm_of;
    for (const RankBuffers& b : ranks) {
      const std::size_t local = local_index(b.rank);
      comm_of.push_back(comms_[local]);
      HELIXMLA_CUDA_CHECK(cudaSetDevice(devices_[local]));
      pack_send_device(shape, b);
    }
    ncclGroupStart();
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      const RankBuffers& b = ranks[k];
      const ncclComm_t comm = comm_of[k];
      const auto stream = static_cast<cudaStream_t>(b.stream);
      const auto* send = static_cast<const std::byte*>(b.send_partial);
      const auto* send_stats = reinterpret_cast<const std::byte*>(b.send_stats);
      auto* recv = static_cast<std::byte*>(b.recv_partial);
      auto* recv_stats = reinterpret_cast<std::byte*>(b.recv_stats);
      const std::size_t mine = shape.partial_chunk_bytes(b.rank);
      const std::size_t mine_stats = shape.stats_chunk_bytes(b.rank);
      for (std::int32_t peer = 0; peer < size_; ++peer) {
        if (peer == b.rank) continue;  // packed into the receive slot already
        // Per pair, partials then stats in the same order on both sides, so
        // NCCL's in-order matching pairs each send with its receive.
        if (const std::size_t n = shape.partial_chunk_bytes(peer); n > 0) {
          note(ncclSend(send + shape.send_partial_offset(peer), n, ncclInt8, peer, comm, stream),
               "ncclSend", b.rank, peer);
          note(ncclSend(send_stats + shape.send_stats_offset(peer), shape.stats_chunk_bytes(peer),
                        ncclInt8, peer, comm, stream),
               "ncclSend", b.rank, peer);
        }
        if (mine > 0) {
          note(ncclRecv(recv + peer * mine, mine, ncclInt8, peer, comm, stream), "ncclRecv",
               b.rank, peer);
          note(ncclRecv(recv_stats + peer * mine_stats, mine_stats, ncclInt8, peer, comm, stream),
               "ncclRecv", b.rank, peer);
        }
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess && end != ncclInProgress && failure.empty()) {
      failure = "ncclGroupEnd of the all-to-all: " + nccl_message(end, nullptr);
    }
    if (!failure.empty()) fail(failure);
    settle("enqueueing the all-to-all", deadline);
  }

  void wait(std::span<void* const> streams) override {
    usable();
    const auto deadline = Clock::now() + options_.timeout;
    wait_for_streams(
        streams,
        [&] {
          check_async_errors("waiting for the exchange");
          if (Clock::now() > deadline) {
            fail("a peer did not complete the exchange within " +
                 std::to_string(options_.timeout.count()) + " ms (HELIXMLA_NCCL_TIMEOUT_MS)");
          }
          std::this_thread::sleep_for(kPollInterval);
        },
        [&](const std::string& why) { fail(why); });
  }

 private:
  std::size_t local_index(std::int32_t rank) const {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i] == rank) return i;
    }
    throw InvalidArgument("rank", rank, std::to_string(rank), "is not driven by this process");
  }

  void usable() const {
    if (aborted_) {
      throw RuntimeFailure("the NCCL exchange was aborted after an earlier failure: " + why_aborted_);
    }
  }

  // Polls every communicator until no operation is in progress.
  void settle(const std::string& what, Clock::time_point deadline) {
    for (ncclComm_t comm : comms_) {
      while (true) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) fail(what + ": ncclCommGetAsyncError: " + nccl_message(r, comm));
        if (state == ncclSuccess) break;
        if (state != ncclInProgress) fail(what + ": " + nccl_message(state, comm));
        if (Clock::now() > deadline) {
          fail(what + ": no progress within " + std::to_string(options_.timeout.count()) +
               " ms (HELIXMLA_NCCL_TIMEOUT_MS); a peer is missing or stuck");
        }
        std::this_thread::sleep_for(kPollInterval);
      }
    }
  }

  void check_async_errors(const std::string& what) {
    for (ncclComm_t comm : comms_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) fail(what + ": ncclCommGetAsyncError: " + nccl_message(r, comm));
      if (state != ncclSuccess && state != ncclInProgress) fail(what + ": " + nccl_message(state, comm));
    }
  }

  [[noreturn]] void fail(const std::string& why) {
    abort_all(why);
    throw RuntimeFailure("Helix NCCL exchange (ranks of " + std::to_string(size_) +
                         "): " + why + "; communicators aborted");
  }

  void abort_all(const std::string& why) {
    if (aborted_) return;
    aborted_ = true;
    why_aborted_ = why;
    for (ncclComm_t& comm : comms_) {
      if (comm != nullptr) ncclCommAbort(comm);
      comm = nullptr;
    }
  }

  // Orderly teardown when healthy; abort when finalising does not settle.
  void shut_down() noexcept {
    if (aborted_) return;
    try {
      ncclGroupStart();
      for (ncclComm_t comm : comms_) {
        if (comm != nullptr) ncclCommFinalize(comm);
      }
      ncclGroupEnd();
      settle("finalising the communicators", Clock::now() + options_.timeout);
      for (ncclComm_t& comm : comms_) {
        if (comm != nullptr) ncclCommDestroy(comm);
        comm = nullptr;
      }
    } catch (...) {
      abort_all("teardown failed");
    }
  }

  std::int32_t size_;
  std::vector<std::int32_t> ranks_;
  std::vector<int> devices_;
  NcclOptions options_;
  std::vector<ncclComm_t> comms_;
  bool aborted_ = false;
  std::string why_aborted_;
};

}  // namespace

NcclOptions NcclOptions::from_environment() {
  NcclOptions options;
  if (const char* text = std::getenv("HELIXMLA_NCCL_TIMEOUT_MS"); text != nullptr && *text != '\0') {
    options.timeout = std::chrono::milliseconds(parse_env_integer("HELIXMLA_NCCL_TIMEOUT_MS", text, 1, 86400000LL));
  }
  return options;
}

NcclProcessInfo NcclProcessInfo::from_environment() {
  NcclProcessInfo info;
  const char* name = nullptr;
  if (const char* v = first_set({"HELIXMLA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                 "SLURM_PROCID", "RANK"},
                                &name)) {
    info.rank = static_cast<std::int32_t>(parse_env_integer(name, v, 0));
  }
  if (const char* v = first_set({"HELIXMLA_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                 "SLURM_NTASKS", "WORLD_SIZE"},
                                &name)) {
    info.size = static_cast<std::int32_t>(parse_env_integer(name, v, 1));
  }
  info.device = info.rank;
  if (const char* v = first_set({"HELIXMLA_DEVICE", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "MPI_LOCALRANKID", "SLURM_LOCALID"},
                                &name)) {
    info.device = static_cast<int>(parse_env_integer(name, v, 0));
  }
  if (info.rank >= info.size) {
    throw InvalidArgument("rank", info.rank, std::to_string(info.rank),
                          "must be below the world size " + std::to_string(info.size));
  }
  if (const char* v = first_set({"HELIXMLA_NCCL_ID"})) info.id_hex = v;
  if (const char* v = first_set({"HELIXMLA_NCCL_ID_FILE"})) info.id_file = v;
  return info;
}

std::string nccl_unique_id_hex() { return to_hex(new_unique_id()); }

std::unique_ptr<Exchange> make_nccl_exchange(std::span<const int> devices,
                                             const NcclOptions& options) {
  if (devices.empty()) throw InvalidArgument("devices", -1, "[]", "needs one device per rank");
  std::vector<std::int32_t> ranks;
  for (std::size_t r = 0; r < devices.size(); ++r) ranks.push_back(static_cast<std::int32_t>(r));
  auto exchange = std::make_unique<NcclExchange>(
      static_cast<std::int32_t>(devices.size()), std::move(ranks),
      std::vector<int>(devices.begin(), devices.end()), options);
  exchange->connect(new_unique_id());
  return exchange;
}

std::unique_ptr<Exchange> make_nccl_exchange(const NcclProcessInfo& process,
                                             const NcclOptions& options) {
  if (process.size < 1 || process.rank < 0 || process.rank >= process.size) {
    throw InvalidArgument("rank", process.rank, std::to_string(process.rank),
                          "must be in [0, size = " + std::to_string(process.size) + ")");
  }
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  ncclUniqueId id{};
  if (!process.id_hex.empty()) {
    id = from_hex(process.id_hex, "HELIXMLA_NCCL_ID");
  } else if (!process.id_file.empty()) {
    id = id_through_file(process, deadline);
  } else if (process.size == 1) {
    id = new_unique_id();
  } else {
    throw InvalidArgument("HELIXMLA_NCCL_ID", -1, "unset",
                          "one process per GPU needs HELIXMLA_NCCL_ID or HELIXMLA_NCCL_ID_FILE");
  }
  auto exchange = std::make_unique<NcclExchange>(process.size, std::vector<std::int32_t>{process.rank},
                                                 std::vector<int>{process.device}, options);
  exchange->connect(id);
  if (process.rank == 0 && !process.id_file.empty()) std::remove(process.id_file.c_str());
  return exchange;
}

}  // namespace helixmla::dist

// Host side of the peer exchange (see peer_exchange.hpp).
#include "dist/peer_exchange.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "core/env_integer.hpp"
#include "helixmla/error.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/peer_exchange_kernel.hpp"
#include "dist/stream_wait.hpp"
#endif

namespace helixmla::dist {

PeerOptions PeerOptions::from_environment() {
  PeerOptions options;
  const char* text = std::getenv("HELIXMLA_EXCHANGE_TIMEOUT_MS");
  if (text == nullptr || *text == '\0') return options;
  // At most a day: the kernels turn it into nanoseconds.
  options.timeout = std::chrono::milliseconds(parse_env_integer("HELIXMLA_EXCHANGE_TIMEOUT_MS", text, 1, 86400000LL));
  return options;
}

#if defined(HELIXMLA_WITH_CUDA)

namespace {

using Clock = std::chrono::steady_clock;

// Enables access from `from` (the current device) to `to` once per process:
// enabling it again is an error CUDA reports (and sanitizers flag).
void enable_peer_access(int from, int to) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard<std::mutex> lock(mutex);
  if (!enabled.insert({from, to}).second) return;
  const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // enabled by someone else in this process
    return;
  }
  if (e != cudaSuccess) enabled.erase({from, to});
  HELIXMLA_CUDA_CHECK(e);
}

class PeerExchange final : public Exchange {
 public:
  PeerExchange(std::vector<int> devices, PeerOptions options)
      : devices_(std::move(devices)), options_(options), flags_(devices_.size(), nullptr) {
    try {
      void* errors = nullptr;
      HELIXMLA_CUDA_CHECK(cudaHostAlloc(&errors, devices_.size() * sizeof(std::uint32_t),
                                        cudaHostAllocMapped | cudaHostAllocPortable));
      host_errors_ = static_cast<std::uint32_t*>(errors);
      std::fill(host_errors_, host_errors_ + devices_.size(), 0u);
      for (std::size_t r = 0; r < devices_.size(); ++r) {
        HELIXMLA_CUDA_CHECK(cudaSetDevice(devices_[r]));
        for (std::size_t p = 0; p < devices_.size(); ++p) {
          if (p != r) enable_peer_access(devices_[r], devices_[p]);
        }
        void* flags = nullptr;
        HELIXMLA_CUDA_CHECK(cudaMalloc(&flags, sizeof(peer::Flags)));
        flags_[r] = static_cast<peer::Flags*>(flags);
        HELIXMLA_CUDA_CHECK(cudaMemset(flags, 0, sizeof(peer::Flags)));
      }
      for (int device : devices_) {
        HELIXMLA_CUDA_CHECK(cudaSetDevice(device));
        HELIXMLA_CUDA_CHECK(cudaDeviceSynchronize());
      }
    } catch (...) {
      release();
      throw;
    }
  }

  ~PeerExchange() override { release(); }

  std::string_view name() const override { return "peer"; }
  bool uses_send_staging() const override { return false; }
  std::int32_t size() const override { return static_cast<std::int32_t>(devices_.size()); }
  std::vector<std::int32_t> local_ranks() const override {
    std::vector<std::int32_t> all;
    for (std::int32_t r = 0; r < size(); ++r) all.push_back(r);
    return all;
  }

  void all_to_all(const ExchangeShape& shape, std::span<const RankBuffers> ranks) override {
    usable();
    check_exchange_size(shape, size());
    const auto table = every_rank_once(size(), ranks, "the peer exchange");
    peer::Links links;
    links.cp = size();
    for (const RankBuffers* b : table) {
      links.recv_partial[b->rank] = b->recv_partial;
      links.recv_stats[b->rank] = b->recv_stats;
      links.flags[b->rank] = flags_[static_cast<std::size_t>(b->rank)];
    }
    const peer::Rows rows{shape.tokens, shape.heads,
                          static_cast<std::int64_t>(shape.width) * static_cast<std::int64_t>(shape.element_bytes())};
    if (rows.tokens * rows.heads == 0) return;
    const auto timeout_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options_.timeout).count());
    for (const RankBuffers* b : table) {
      links.rank = b->rank;
      links.host_error = host_errors_ + b->rank;
      try {
        HELIXMLA_CUDA_CHECK(cudaSetDevice(devices_[static_cast<std::size_t>(b->rank)]));
        peer::launch(links, rows, b->partial, b->partial_stats, timeout_ns, b->stream);
      } catch (const std::exception& e) {
        // The ranks launched so far wait for this one in vain: they time
        // out, and the step counts disagree from here on.
        fail(std::string("launching rank ") + std::to_string(b->rank) + "'s kernel: " + e.what());
      }
    }
  }

  void wait(std::span<void* const> streams) override {
    usable();
    // The kernels bound their own waits and flag a timeout in host memory,
    // read here without any CUDA call; the deadline only guards against a
    // stream that never reaches the exchange.
    const auto deadline = Clock::now() + 2 * options_.timeout;
    wait_for_streams(
        streams,
        [&] {
          check_timeouts();
          if (Clock::now() > deadline) fail("a stream did not reach the exchange in time");
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        },
        [&](const std::string& why) { fail(why); });
    check_timeouts();
  }

 private:
  // Waits for every device first: a kernel still spinning (bounded by the
  // timeout) must not find its flags or error word freed.
  void release() noexcept {
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      if (cudaSetDevice(devices_[r]) == cudaSuccess) cudaDeviceSynchronize();
    }
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      if (flags_[r] == nullptr) continue;
      cudaSetDevice(devices_[r]);
      cudaFree(flags_[r]);
      flags_[r] = nullptr;
    }
    if (host_errors_ != nullptr) cudaFreeHost(host_errors_);
    host_errors_ = nullptr;
    cudaGetLastError();
  }

  void check_timeouts() {
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      if (static_cast<volatile std::uint32_t*>(host_errors_)[r] != 0) {
        fail("rank " + std::to_string(r) + " waited longer than " + std::to_string(options_.timeout.count()) +
             " ms (HELIXMLA_EXCHANGE_TIMEOUT_MS) for a peer");
      }
    }
  }

  void usable() const {
    if (broken_) throw RuntimeFailure("the peer exchange failed earlier and refuses further use: " + why_);
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = true;
    why_ = why;
    throw RuntimeFailure("Helix peer exchange (ranks of " + std::to_string(size()) + "): " + why);
  }

  std::vector<int> devices_;
  PeerOptions options_;
  std::vector<peer::Flags*> flags_;
  std::uint32_t* host_errors_ = nullptr;  // one word per rank, mapped pinned memory
  bool broken_ = false;
  std::string why_;
};

// Why `devices` cannot host a peer exchange, as the InvalidArgument to throw;
// nothing when they can.
std::optional<InvalidArgument> unsuitable_devices(std::span<const int> devices) {
  if (devices.empty()) return InvalidArgument("devices", -1, "[]", "needs one device per rank");
  if (devices.size() > static_cast<std::size_t>(peer::kMaxRanks)) {
    return InvalidArgument("devices", -1, std::to_string(devices.size()),
                           "the peer exchange takes at most " + std::to_string(peer::kMaxRanks) + " ranks");
  }
  for (std::size_t a = 0; a < devices.size(); ++a) {
    for (std::size_t b = 0; b < devices.size(); ++b) {
      if (a == b) continue;
      if (devices[a] == devices[b]) {
        return InvalidArgument("devices", static_cast<std::int64_t>(b), std::to_string(devices[b]),
                               "each rank of the peer exchange needs its own GPU");
      }
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, devices[a], devices[b]) != cudaSuccess || can == 0) {
        cudaGetLastError();
        return InvalidArgument("devices", static_cast<std::int64_t>(b), std::to_string(devices[b]),
                               "GPU " + std::to_string(devices[a]) + " cannot access GPU " +
                                   std::to_string(devices[b]) + " directly (no peer access); use NCCL");
      }
    }
  }
  return std::nullopt;
}

}  // namespace

bool peer_exchange_possible(std::span<const int> devices) { return !unsuitable_devices(devices); }

std::unique_ptr<Exchange> make_peer_exchange(std::span<const int> devices, const PeerOptions& options) {
  if (auto why = unsuitable_devices(devices)) throw *why;
  return std::make_unique<PeerExchange>(std::vector<int>(devices.begin(), devices.end()), options);
}

#else

bool peer_exchange_possible(std::span<const int>) { return false; }

std::unique_ptr<Exchange> make_peer_exchange(std::span<const int>, const PeerOptions&) {
  throw InvalidArgument("exchange", -1, "peer", "this build has no CUDA support");
}

#endif

}  // namespace helixmla::dist

// Many Helix ranks in one process, exchanging through host memcpy or, for
// ranks sharing one GPU, device-to-device copies on the receivers' streams.
// Each rank first packs its output (its own chunk straight into its receive
// slot); the copies then move every other chunk.
#include <cstring>
#include <string>

#include "dist/exchange.hpp"
#include "helixmla/error.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#endif

namespace helixmla::dist {

namespace {

template <typename Copy>
void for_each_chunk(const ExchangeShape& shape, const std::vector<const RankBuffers*>& table,
                    Copy copy) {
  for (std::int32_t receiver = 0; receiver < shape.cp; ++receiver) {
    const RankBuffers& to = *table[static_cast<std::size_t>(receiver)];
    const std::size_t chunk = shape.partial_chunk_bytes(receiver);
    const std::size_t stats_chunk = shape.stats_chunk_bytes(receiver);
    if (chunk == 0) continue;
    for (std::int32_t source = 0; source < shape.cp; ++source) {
      if (source == receiver) continue;
      const RankBuffers& from = *table[static_cast<std::size_t>(source)];
      copy(to, static_cast<std::byte*>(to.recv_partial) + source * chunk,
           static_cast<const std::byte*>(from.send_partial) + shape.send_partial_offset(receiver),
           chunk);
      copy(to, reinterpret_cast<std::byte*>(to.recv_stats) + source * stats_chunk,
           reinterpret_cast<const std::byte*>(from.send_stats) + shape.send_stats_offset(receiver),
           stats_chunk);
    }
  }
}

// In process, every rank is local.
std::vector<std::int32_t> all_ranks(std::int32_t cp) {
  std::vector<std::int32_t> all;
  for (std::int32_t r = 0; r < cp; ++r) all.push_back(r);
  return all;
}

class HostExchange final : public Exchange {
 public:
  explicit HostExchange(std::int32_t cp) : cp_(cp) {}
  std::string_view name() const override { return "in_process_host"; }
  std::int32_t size() const override { return cp_; }
  std::vector<std::int32_t> local_ranks() const override { return all_ranks(cp_); }
  void all_to_all(const ExchangeShape& shape, std::span<const RankBuffers> ranks) override {
    check_exchange_size(shape, cp_);
    const auto table = every_rank_once(cp_, ranks, "an in-process exchange");
    for (const RankBuffers* b : table) pack_send_host(shape, *b);
    for_each_chunk(shape, table,
                   [](const RankBuffers&, std::byte* dst, const std::byte* src, std::size_t n) {
                     std::memcpy(dst, src, n);
                   });
  }
  void wait(std::span<void* const>) override {}

 private:
  std::int32_t cp_;
};

#if defined(HELIXMLA_WITH_CUDA)
class DeviceExchange final : public Exchange {
 public:
  DeviceExchange(std::int32_t cp, int device) : cp_(cp), device_(device) {}
  ~DeviceExchange() override {
    for (cudaEvent_t e : ready_) cudaEventDestroy(e);
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
  }
  std::string_view name() const override { return "in_process_device"; }
  std::int32_t size() const override { return cp_; }
  std::vector<std::int32_t> local_ranks() const override { return all_ranks(cp_); }

  void all_to_all(const ExchangeShape& shape, std::span<const RankBuffers> ranks) override {
    check_exchange_size(shape, cp_);
    const auto table = every_rank_once(cp_, ranks, "an in-process exchange");
    HELIXMLA_CUDA_CHECK(cudaSetDevice(device_));
    for (const RankBuffers* b : table) pack_send_device(shape, *b);
    const bool one_stream = shares_one_stream(table);
    if (!one_stream) {
      create_events();
      // Receivers copy only after every sender's partials are written.
      for (std::int32_t r = 0; r < cp_; ++r) {
        HELIXMLA_CUDA_CHECK(cudaEventRecord(ready_[r], stream_of(*table[r])));
      }
      for (std::int32_t r = 0; r < cp_; ++r) {
        for (std::int32_t s = 0; s < cp_; ++s) {
          if (s != r) HELIXMLA_CUDA_CHECK(cudaStreamWaitEvent(stream_of(*table[r]), ready_[s], 0));
        }
      }
    }
    for_each_chunk(shape, table,
                   [](const RankBuffers& to, std::byte* dst, const std::byte* src, std::size_t n) {
                     HELIXMLA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice,
                                                         static_cast<cudaStream_t>(to.stream)));
                   });
    if (!one_stream) {
      // Senders may overwrite their send buffers only after every receiver copied.
      for (std::int32_t r = 0; r < cp_; ++r) {
        HELIXMLA_CUDA_CHECK(cudaEventRecord(done_[r], stream_of(*table[r])));
      }
      for (std::int32_t r = 0; r < cp_; ++r) {
        for (std::int32_t s = 0; s < cp_; ++s) {
          if (s != r) HELIXMLA_CUDA_CHECK(cudaStreamWaitEvent(stream_of(*table[r]), done_[s], 0));
        }
      }
    }
  }

  void wait(std::span<void* const> streams) override {
    HELIXMLA_CUDA_CHECK(cudaSetDevice(device_));
    for (void* s : streams) HELIXMLA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s)));
  }

 private:
  static cudaStream_t stream_of(const RankBuffers& b) { return static_cast<cudaStream_t>(b.stream); }

  static bool shares_one_stream(const std::vector<const RankBuffers*>& table) {
    for (const RankBuffers* b : table) {
      if (b->stream != table.front()->stream) return false;
    }
    return true;
  }

  void create_events() {
    if (!ready_.empty()) return;
    ready_.resize(static_cast<std::size_t>(cp_));
    done_.resize(static_cast<std::size_t>(cp_));
    for (std::int32_t r = 0; r < cp_; ++r) {
      HELIXMLA_CUDA_CHECK(cudaEventCreateWithFlags(&ready_[r], cudaEventDisableTiming));
      HELIXMLA_CUDA_CHECK(cudaEventCreateWithFlags(&done_[r], cudaEventDisableTiming));
    }
  }

  std::int32_t cp_;
  int device_;
  std::vector<cudaEvent_t> ready_, done_;
};
#endif

}  // namespace

std::unique_ptr<Exchange> make_in_process_exchange(std::int32_t cp, Location where) {
  if (cp < 1) throw InvalidArgument("cp_size", -1, std::to_string(cp), "must be at least 1");
  if (where.kind == Location::Kind::host) return std::make_unique<HostExchange>(cp);
#if defined(HELIXMLA_WITH_CUDA)
  return std::make_unique<DeviceExchange>(cp, where.device);
#else
  throw InvalidArgument("location", -1, "cuda", "this build has no CUDA support");
#endif
}

}  // namespace helixmla::dist

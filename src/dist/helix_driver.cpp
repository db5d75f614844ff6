#include "dist/helix_driver.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <new>
#include <string>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#endif
#if defined(HELIXMLA_WITH_NCCL)
#include "dist/nccl_exchange.hpp"
#endif
#include "dist/peer_exchange.hpp"

namespace helixmla::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::align_val_t kHostAlignment{64};

#if !defined(HELIXMLA_WITH_CUDA)
[[noreturn]] void no_cuda() {
  throw InvalidArgument("mode", -1, "device", "this build has no CUDA support");
}
#endif

// Owning bytes in host memory or on one GPU.
class Memory {
 public:
  Memory() = default;
  Memory(Location where, std::size_t bytes) : where_(where), bytes_(bytes) {
    if (bytes_ == 0) return;
    if (where_.kind == Location::Kind::host) {
      data_ = ::operator new(bytes_, kHostAlignment);
      return;
    }
#if defined(HELIXMLA_WITH_CUDA)
    HELIXMLA_CUDA_CHECK(cudaSetDevice(where_.device));
    HELIXMLA_CUDA_CHECK(cudaMalloc(&data_, bytes_));
#else
    no_cuda();
#endif
  }
  Memory(Memory&& other) noexcept { swap(other); }
  Memory& operator=(Memory&& other) noexcept {
    Memory gone(std::move(*this));
    swap(other);
    return *this;
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() {
    if (data_ == nullptr) return;
    if (where_.kind == Location::Kind::host) {
      ::operator delete(data_, kHostAlignment);
      return;
    }
#if defined(HELIXMLA_WITH_CUDA)
    cudaFree(data_);
#endif
  }

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  void upload(const void* host, std::size_t bytes) {
    if (bytes == 0) return;
    if (where_.kind == Location::Kind::host) {
      std::memcpy(data_, host, bytes);
      return;
    }
#if defined(HELIXMLA_WITH_CUDA)
    HELIXMLA_CUDA_CHECK(cudaSetDevice(where_.device));
    HELIXMLA_CUDA_CHECK(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice));
#endif
  }

 private:
  void swap(Memory& other) noexcept {
    std::swap(where_, other.where_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }

  Location where_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

#if defined(HELIXMLA_WITH_CUDA)
std::size_t pool_bytes(const Problem& p) {
  return static_cast<std::size_t>(p.kv.num_pages) * static_cast<std::size_t>(p.kv.page_size) *
         static_cast<std::size_t>(p.dims.head_dim()) * dtype_size(p.kv.dtype);
}

std::size_t q_bytes(const Problem& p) {
  return static_cast<std::size_t>(p.num_tokens()) * static_cast<std::size_t>(p.num_heads) *
         static_cast<std::size_t>(p.dims.head_dim()) * dtype_size(p.q_dtype);
}
#endif

// Copies `rows` rows of `row_bytes` between buffers with different row pitches.
void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t row_bytes, std::size_t rows, bool src_on_device) {
  if (row_bytes == 0 || rows == 0) return;
  if (!src_on_device) {
    for (std::size_t i = 0; i < rows; ++i) {
      std::memcpy(static_cast<std::byte*>(dst) + i * dst_pitch,
                  static_cast<const std::byte*>(src) + i * src_pitch, row_bytes);
    }
    return;
  }
#if defined(HELIXMLA_WITH_CUDA)
  HELIXMLA_CUDA_CHECK(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                   cudaMemcpyDeviceToHost));
#endif
}

}  // namespace

struct HelixDriver::Rank {
  std::int32_t rank = 0;
  Location where;
  HeadRange heads;
  HelixLocalMetadata meta;
  Problem problem;
  std::shared_ptr<Memory> q, pool;
  Memory partial, partial_stats, send_partial, send_stats, recv_partial, recv_stats, out, out_stats;
  Memory workspace;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<PreparedRun> run;
  void* stream = nullptr;  // cudaStream_t
  bool owns_stream = false;
  std::array<void*, 4> events{};  // cudaEvent_t at the phase boundaries

  bool on_device() const { return where.kind == Location::Kind::cuda; }

  ~Rank() {
#if defined(HELIXMLA_WITH_CUDA)
    for (void* e : events) {
      if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
    }
    if (owns_stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
#endif
  }
};

// One captured CUDA graph per owned stream (one per GPU in nccl and peer
// modes, one in all in device mode) for the whole step and for each phase
// alone.
struct HelixDriver::Graphs {
#if defined(HELIXMLA_WITH_CUDA)
  struct Captured {
    void* stream = nullptr;
    int device = 0;
    cudaGraphExec_t exec = nullptr;
  };
  struct Timers {
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  // Index 0: the whole step; 1 + StepPhase: that phase alone.
  std::array<std::vector<Captured>, 4> sets;
  std::vector<Timers> timers;  // per owned stream
  ~Graphs() {
    for (auto& set : sets) {
      for (Captured& c : set) {
        if (c.exec) cudaGraphExecDestroy(c.exec);
      }
    }
    for (Timers& t : timers) {
      if (t.start) cudaEventDestroy(t.start);
      if (t.stop) cudaEventDestroy(t.stop);
    }
  }
#endif
};

HelixDriver::HelixDriver(const Problem& global, HelixDriverOptions options)
    : options_(std::move(options)), global_(global) {
  const std::int32_t cp = options_.cp;
  if (cp < 1) throw InvalidArgument("cp", -1, std::to_string(cp), "must be at least 1");
  if (global.location.kind != Location::Kind::host) {
    throw InvalidArgument("location", -1, "cuda", "the driver takes a batch in host memory");
  }
  if (global.out_dtype != DType::bf16 && global.out_dtype != DType::fp16) {
    throw InvalidArgument("out_dtype", -1, std::string(to_string(global.out_dtype)),
                          "Helix partial outputs are bf16 or fp16");
  }
  std::vector<int> rank_devices(static_cast<std::size_t>(cp), 0);
  switch (options_.mode) {
    case HelixMode::host:
      exchange_ = make_in_process_exchange(cp, Location::host());
      break;
    case HelixMode::device: {
      if (options_.devices.size() > 1) {
        throw InvalidArgument("devices", -1, std::to_string(options_.devices.size()),
                              "in-process device mode runs every rank on one GPU");
      }
      const int device = options_.devices.empty() ? 0 : options_.devices.front();
      std::fill(rank_devices.begin(), rank_devices.end(), device);
      exchange_ = make_in_process_exchange(cp, Location::cuda(device));
      break;
    }
    case HelixMode::nccl:
    case HelixMode::peer:
      if (static_cast<std::int32_t>(options_.devices.size()) != cp) {
        throw InvalidArgument("devices", -1, std::to_string(options_.devices.size()),
                              "a GPU per rank needs one device per rank (cp = " + std::to_string(cp) +
                                  ")");
      }
      rank_devices = options_.devices;
      if (options_.mode == HelixMode::peer) {
        exchange_ = make_peer_exchange(options_.devices, PeerOptions::from_environment());
        break;
      }
#if defined(HELIXMLA_WITH_NCCL)
      exchange_ = make_nccl_exchange(options_.devices, NcclOptions::from_environment());
#else
      throw InvalidArgument("mode", -1, "nccl", "this build has no NCCL support");
#endif
      break;
  }

  shape_ = ExchangeShape{cp, global.num_tokens(), global.num_heads, global.dims.kv_lora_rank,
                         global.out_dtype};
  const bool device_mode = options_.mode != HelixMode::host;
  if (device_mode && !options_.runtime.environment) {
    options_.runtime.environment = Environment::detect();
  }

#if defined(HELIXMLA_WITH_CUDA)
  std::map<int, std::shared_ptr<Memory>> q_on, pool_on;
  void* shared_stream = nullptr;
#endif
  for (std::int32_t r = 0; r < cp; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->rank = r;
    const int device = rank_devices[static_cast<std::size_t>(r)];
    rank->where = device_mode ? Location::cuda(device) : Location::host();
    rank->heads = shape_.heads_of(r);
    rank->meta = helix_localize(global, cp, r);

    const Location where = rank->where;
    const std::size_t out_row = static_cast<std::size_t>(shape_.width) * shape_.element_bytes();
    const auto tokens = static_cast<std::size_t>(shape_.tokens);
    rank->partial = Memory(where, shape_.send_partial_bytes());
    rank->partial_stats = Memory(where, shape_.send_stats_bytes());
    const bool staging = exchange_->uses_send_staging();
    rank->send_partial = Memory(where, staging ? shape_.send_partial_bytes() : 0);
    rank->send_stats = Memory(where, staging ? shape_.send_stats_bytes() : 0);
    rank->recv_partial = Memory(where, shape_.recv_partial_bytes(r));
    rank->recv_stats = Memory(where, shape_.recv_stats_bytes(r));
    rank->out = Memory(where, tokens * static_cast<std::size_t>(rank->heads.count) * out_row);
    rank->out_stats =
        Memory(where, tokens * static_cast<std::size_t>(rank->heads.count) * 2 * sizeof(float));

    rank->problem = helix_local_problem(global, rank->meta, rank->partial.data(),
                                        static_cast<float*>(rank->partial_stats.data()));
    if (device_mode) {
#if defined(HELIXMLA_WITH_CUDA)
      if (!q_on[device]) {
        q_on[device] = std::make_shared<Memory>(where, q_bytes(global));
        q_on[device]->upload(global.q, q_bytes(global));
        pool_on[device] = std::make_shared<Memory>(where, pool_bytes(global));
        pool_on[device]->upload(global.kv.pool, pool_bytes(global));
      }
      rank->q = q_on[device];
      rank->pool = pool_on[device];
      rank->problem.location = where;
      rank->problem.q = rank->q->data();
      rank->problem.kv.pool = rank->pool->data();

      HELIXMLA_CUDA_CHECK(cudaSetDevice(device));
      if (options_.mode != HelixMode::device || shared_stream == nullptr) {
        cudaStream_t stream = nullptr;
        HELIXMLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        rank->stream = stream;
        rank->owns_stream = true;
        shared_stream = stream;
      } else {
        rank->stream = shared_stream;
      }
      for (void*& e : rank->events) {
        cudaEvent_t event = nullptr;
        HELIXMLA_CUDA_CHECK(cudaEventCreate(&event));
        e = event;
      }
#else
      no_cuda();
#endif
    }

    RuntimeOptions runtime_options = options_.runtime;
    if (device_mode) runtime_options.environment->device = device;
    rank->runtime = std::make_unique<Runtime>(std::move(runtime_options));
    const StepPlan step = rank->runtime->plan_step(rank->problem);
    rank->workspace = Memory(where, step.workspace_bytes());
    rank->run = step.prepare(Workspace{rank->workspace.data(), rank->workspace.bytes()}, rank->stream);
    ranks_.push_back(std::move(rank));
  }
#if defined(HELIXMLA_WITH_CUDA)
  for (const auto& rank : ranks_) {
    if (!rank->on_device()) continue;
    HELIXMLA_CUDA_CHECK(cudaSetDevice(rank->where.device));
    HELIXMLA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(rank->stream)));
  }
#endif
}

HelixDriver::~HelixDriver() = default;

void HelixDriver::select_device(const Rank& rank) {
#if defined(HELIXMLA_WITH_CUDA)
  if (rank.on_device()) HELIXMLA_CUDA_CHECK(cudaSetDevice(rank.where.device));
#else
  (void)rank;
#endif
}

void HelixDriver::enqueue_phase(StepPhase phase) {
  switch (phase) {
    case StepPhase::attention:
      for (const auto& rank : ranks_) {
        select_device(*rank);
        rank->run->enqueue(rank->stream);
      }
      return;
    case StepPhase::exchange: {
      std::vector<RankBuffers> buffers;
      for (const auto& rank : ranks_) {
        buffers.push_back(RankBuffers{rank->rank, rank->partial.data(),
                                      static_cast<const float*>(rank->partial_stats.data()),
                                      rank->send_partial.data(),
                                      static_cast<float*>(rank->send_stats.data()),
                                      rank->recv_partial.data(),
                                      static_cast<float*>(rank->recv_stats.data()), rank->stream});
      }
      exchange_->all_to_all(shape_, buffers);
      return;
    }
    case StepPhase::combine:
      for (const auto& rank : ranks_) {
        select_device(*rank);
        HelixCombineArgs args;
        args.cp = shape_.cp;
        args.tokens = shape_.tokens;
        args.heads = rank->heads.count;
        args.width = shape_.width;
        args.partial = rank->recv_partial.data();
        args.partial_dtype = shape_.partial_dtype;
        args.stats = static_cast<const float*>(rank->recv_stats.data());
        args.out = rank->out.data();
        args.out_dtype = global_.out_dtype;
        args.out_stats = static_cast<float*>(rank->out_stats.data());
        if (rank->on_device()) {
#if defined(HELIXMLA_WITH_CUDA)
          helix_combine_device(args, rank->stream);
#endif
        } else {
          helix_combine_host(args);
        }
      }
      return;
  }
}

void HelixDriver::enqueue_step(bool record_events,
                               std::array<std::chrono::steady_clock::time_point, 4>* host_marks) {
  auto mark = [&](int boundary) {
    if (host_marks != nullptr) (*host_marks)[static_cast<std::size_t>(boundary)] = Clock::now();
#if defined(HELIXMLA_WITH_CUDA)
    if (!record_events) return;
    for (const auto& rank : ranks_) {
      if (!rank->on_device()) continue;
      select_device(*rank);
      HELIXMLA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(rank->events[boundary]),
                                          static_cast<cudaStream_t>(rank->stream)));
    }
#else
    (void)record_events;
#endif
  };
  mark(0);
  enqueue_phase(StepPhase::attention);
  mark(1);
  enqueue_phase(StepPhase::exchange);
  mark(2);
  enqueue_phase(StepPhase::combine);
  mark(3);
}

HelixStepTimes HelixDriver::step() {
  HelixStepTimes times;
  if (options_.mode == HelixMode::host) {
    // Host phases run synchronously, so the phase boundaries are clock reads.
    std::array<Clock::time_point, 4> marks;
    enqueue_step(false, &marks);
    auto us = [&](int from, int to) {
      return std::chrono::duration<double, std::micro>(marks[to] - marks[from]).count();
    };
    times.attention_us = us(0, 1);
    times.exchange_us = us(1, 2);
    times.combine_us = us(2, 3);
    times.total_us = us(0, 3);
    return times;
  }
#if defined(HELIXMLA_WITH_CUDA)
  enqueue_step(true, nullptr);
  std::vector<void*> streams;
  for (const auto& rank : ranks_) streams.push_back(rank->stream);
  exchange_->wait(streams);
  auto elapsed = [](void* from, void* to) {
    float ms = 0.0f;
    HELIXMLA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from),
                                             static_cast<cudaEvent_t>(to)));
    return 1000.0 * ms;
  };
  for (const auto& rank : ranks_) {
    HELIXMLA_CUDA_CHECK(cudaSetDevice(rank->where.device));
    times.attention_us = std::max(times.attention_us, elapsed(rank->events[0], rank->events[1]));
    times.exchange_us = std::max(times.exchange_us, elapsed(rank->events[1], rank->events[2]));
    times.combine_us = std::max(times.combine_us, elapsed(rank->events[2], rank->events[3]));
    times.total_us = std::max(times.total_us, elapsed(rank->events[0], rank->events[3]));
  }
  return times;
#else
  no_cuda();
#endif
}

#if defined(HELIXMLA_WITH_CUDA)
namespace {

// Captures what `body` enqueues on each stream into one graph per stream.
// Returns the failure, empty on success (then `set` holds the executables);
// streams whose capture began are always taken out of capture mode again.
template <typename Captured, typename Body>
std::string capture_graphs(std::vector<Captured>& set, Body body) {
  std::string failure;
  std::size_t begun = 0;
  for (; begun < set.size(); ++begun) {
    cudaSetDevice(set[begun].device);
    const cudaError_t began = cudaStreamBeginCapture(static_cast<cudaStream_t>(set[begun].stream),
                                                     cudaStreamCaptureModeThreadLocal);
    if (began != cudaSuccess) {
      failure = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(began);
      break;
    }
  }
  if (failure.empty()) {
    try {
      body();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  std::vector<cudaGraph_t> graphs(set.size(), nullptr);
  for (std::size_t i = 0; i < begun; ++i) {
    cudaSetDevice(set[i].device);
    const cudaError_t end = cudaStreamEndCapture(static_cast<cudaStream_t>(set[i].stream), &graphs[i]);
    if (end != cudaSuccess && failure.empty()) {
      failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
    }
  }
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (graphs[i] == nullptr) continue;
    if (failure.empty()) {
      cudaSetDevice(set[i].device);
      const cudaError_t made = cudaGraphInstantiate(&set[i].exec, graphs[i], 0);
      if (made != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
    }
    cudaGraphDestroy(graphs[i]);
  }
  if (!failure.empty()) {
    for (Captured& c : set) {
      if (c.exec) cudaGraphExecDestroy(c.exec);
      c.exec = nullptr;
    }
    cudaGetLastError();
  }
  return failure;
}

}  // namespace
#endif

bool HelixDriver::ensure_graphs(std::size_t set, std::string* why_not) {
  if (options_.mode == HelixMode::host) {
    if (why_not != nullptr) *why_not = "host mode has no CUDA graphs";
    return false;
  }
#if defined(HELIXMLA_WITH_CUDA)
  if (!graphs_) {
    auto graphs = std::make_unique<Graphs>();
    for (const auto& rank : ranks_) {
      if (!rank->owns_stream) continue;
      for (auto& captured : graphs->sets) {
        captured.push_back(Graphs::Captured{rank->stream, rank->where.device, nullptr});
      }
      Graphs::Timers& t = graphs->timers.emplace_back();
      HELIXMLA_CUDA_CHECK(cudaSetDevice(rank->where.device));
      HELIXMLA_CUDA_CHECK(cudaEventCreate(&t.start));
      HELIXMLA_CUDA_CHECK(cudaEventCreate(&t.stop));
    }
    graphs_ = std::move(graphs);
  }
  if (graphs_->sets[set].empty()) {
    if (why_not != nullptr) *why_not = "no rank of this process owns a stream";
    return false;
  }
  if (graphs_->sets[set].front().exec != nullptr) return true;
  const std::string failure = capture_graphs(graphs_->sets[set], [&] {
    if (set == 0) {
      enqueue_step(false, nullptr);
    } else {
      enqueue_phase(static_cast<StepPhase>(set - 1));
    }
  });
  if (failure.empty()) return true;
  if (why_not != nullptr) *why_not = "capture failed: " + failure;
  return false;
#else
  (void)set;
  if (why_not != nullptr) *why_not = "this build has no CUDA support";
  return false;
#endif
}

double HelixDriver::replay_us(std::size_t set, int replays) {
#if defined(HELIXMLA_WITH_CUDA)
  auto& captured = graphs_->sets[set];
  std::vector<void*> streams;
  for (std::size_t i = 0; i < captured.size(); ++i) {
    HELIXMLA_CUDA_CHECK(cudaSetDevice(captured[i].device));
    HELIXMLA_CUDA_CHECK(cudaEventRecord(graphs_->timers[i].start,
                                        static_cast<cudaStream_t>(captured[i].stream)));
    streams.push_back(captured[i].stream);
  }
  // Ranks take turns in the host loop, so after the first replay every GPU
  // has its next replays queued and host launch skew no longer shows.
  for (int r = 0; r < replays; ++r) {
    for (auto& c : captured) {
      HELIXMLA_CUDA_CHECK(cudaSetDevice(c.device));
      HELIXMLA_CUDA_CHECK(cudaGraphLaunch(c.exec, static_cast<cudaStream_t>(c.stream)));
    }
  }
  for (std::size_t i = 0; i < captured.size(); ++i) {
    HELIXMLA_CUDA_CHECK(cudaSetDevice(captured[i].device));
    HELIXMLA_CUDA_CHECK(cudaEventRecord(graphs_->timers[i].stop,
                                        static_cast<cudaStream_t>(captured[i].stream)));
  }
  exchange_->wait(streams);
  double slowest = 0.0;
  for (std::size_t i = 0; i < captured.size(); ++i) {
    float ms = 0.0f;
    HELIXMLA_CUDA_CHECK(cudaSetDevice(captured[i].device));
    HELIXMLA_CUDA_CHECK(cudaEventElapsedTime(&ms, graphs_->timers[i].start, graphs_->timers[i].stop));
    slowest = std::max(slowest, 1000.0 * ms / replays);
  }
  return slowest;
#else
  (void)set, (void)replays;
  no_cuda();
#endif
}

std::optional<double> HelixDriver::graph_step_us(std::string* why_not) {
  if (!ensure_graphs(0, why_not)) return std::nullopt;
  return replay_us(0, 1);
}

std::optional<HelixStepTimes> HelixDriver::graph_steady_times(int replays, std::string* why_not) {
  replays = std::max(replays, 1);
  std::array<double, 4> us{};
  for (std::size_t set = 0; set < us.size(); ++set) {
    if (!ensure_graphs(set, why_not)) return std::nullopt;
    replay_us(set, 1);  // warm-up: a graph's first launch also uploads it
    us[set] = replay_us(set, replays);
  }
  HelixStepTimes times;
  times.total_us = us[0];
  times.attention_us = us[1 + static_cast<std::size_t>(StepPhase::attention)];
  times.exchange_us = us[1 + static_cast<std::size_t>(StepPhase::exchange)];
  times.combine_us = us[1 + static_cast<std::size_t>(StepPhase::combine)];
  return times;
}

void HelixDriver::poison_outputs() {
  for (const auto& rank : ranks_) {
    for (Memory* m : {&rank->out, &rank->out_stats, &rank->recv_partial, &rank->recv_stats}) {
      if (m->bytes() == 0) continue;
      if (!rank->on_device()) {
        std::memset(m->data(), 0xff, m->bytes());  // NaN in every float type
        continue;
      }
#if defined(HELIXMLA_WITH_CUDA)
      const auto stream = static_cast<cudaStream_t>(rank->stream);
      HELIXMLA_CUDA_CHECK(cudaSetDevice(rank->where.device));
      HELIXMLA_CUDA_CHECK(cudaMemsetAsync(m->data(), 0xff, m->bytes(), stream));
      HELIXMLA_CUDA_CHECK(cudaStreamSynchronize(stream));
#endif
    }
  }
}

void HelixDriver::fetch_output(void* out, float* stats) const {
  const std::size_t head_bytes = static_cast<std::size_t>(shape_.width) * shape_.element_bytes();
  const std::size_t heads = static_cast<std::size_t>(shape_.heads);
  const auto tokens = static_cast<std::size_t>(shape_.tokens);
  for (const auto& rank : ranks_) {
    const auto count = static_cast<std::size_t>(rank->heads.count);
    const auto begin = static_cast<std::size_t>(rank->heads.begin);
#if defined(HELIXMLA_WITH_CUDA)
    if (rank->on_device()) HELIXMLA_CUDA_CHECK(cudaSetDevice(rank->where.device));
#endif
    if (out != nullptr) {
      copy_rows(static_cast<std::byte*>(out) + begin * head_bytes, heads * head_bytes,
                rank->out.data(), count * head_bytes, count * head_bytes, tokens,
                rank->on_device());
    }
    if (stats != nullptr) {
      const std::size_t stat_bytes = 2 * sizeof(float);
      copy_rows(reinterpret_cast<std::byte*>(stats) + begin * stat_bytes, heads * stat_bytes,
                rank->out_stats.data(), count * stat_bytes, count * stat_bytes, tokens,
                rank->on_device());
    }
  }
}

std::string HelixDriver::backends() const {
  const Rank& rank = *ranks_.front();
  return describe_choices(rank.runtime->select(rank.problem));
}

std::string HelixDriver::exchange_name() const { return std::string(exchange_->name()); }

}  // namespace helixmla::dist

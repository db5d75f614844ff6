// See peer_exchange_kernel.hpp for the protocol.
#include "cuda/peer_exchange_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/helix_combine_row.cuh"
#include "helixmla/error.hpp"

namespace helixmla::dist::peer {

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ void store_release(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ std::uint32_t load_acquire(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag has reached `epoch` (wrap-around safe); false on timeout
// or once another block of this rank has given up.
__device__ bool wait_for(const std::uint32_t* flag, std::uint32_t epoch, std::uint64_t timeout_ns,
                         const Links& links) {
  std::uint32_t* error = &links.flags[links.rank]->error;
  const std::uint64_t start = global_ns();
  while (static_cast<std::int32_t>(load_acquire(flag) - epoch) < 0) {
    if (*static_cast<volatile std::uint32_t*>(error) != 0) return false;
    if (global_ns() - start > timeout_ns) {
      atomicExch(error, 1u);
      *static_cast<volatile std::uint32_t*>(links.host_error) = 1u;
      __threadfence_system();
      return false;
    }
  }
  return true;
}

// Where row (token, head) of the [tokens, H] output goes: its owner and its
// row within the owner's slot of this rank.
struct Placement {
  int owner;
  long long begin;  // owner's first head
  long long count;  // owner's head count
  long long token;
  int head;
};

__device__ __forceinline__ Placement place(long long row, const Rows& rows, int cp) {
  Placement p;
  p.token = row / rows.heads;
  p.head = static_cast<int>(row % rows.heads);
  p.owner = static_cast<int>(((static_cast<long long>(p.head) + 1) * cp - 1) / rows.heads);
  p.begin = static_cast<long long>(p.owner) * rows.heads / cp;
  p.count = static_cast<long long>(p.owner + 1) * rows.heads / cp - p.begin;
  return p;
}

// Row of (token, head - begin) in `source`'s slot of the owner's buffer.
__device__ __forceinline__ long long slot_row(const Placement& p, int source, long long tokens) {
  return (source * tokens + p.token) * p.count + (p.head - p.begin);
}

template <DType Partial, typename Unit>
__global__ void __launch_bounds__(kThreads)
exchange_kernel(Links links, Rows rows, const std::uint8_t* partial, const float* stats,
                Combine combine, std::uint64_t timeout_ns) {
  using Storage = typename cuda::DeviceElement<Partial>::Storage;
  const int b = blockIdx.x;
  const int cp = links.cp;
  const int me = links.rank;
  const bool fused = combine.out != nullptr;
  Flags* mine = links.flags[me];
  const std::uint32_t epoch = mine->epoch[b] + 1;
  const int peer = threadIdx.x;
  const bool signals = peer < cp && peer != me;
  __shared__ int gave_up;
  if (threadIdx.x == 0) gave_up = 0;
  __syncthreads();

  if (signals) store_release(&links.flags[peer]->ready[me][b], epoch);
  if (signals && !wait_for(&mine->ready[peer][b], epoch, timeout_ns, links)) gave_up = 1;
  __syncthreads();
  if (gave_up) return;  // a peer's slot may still be in use: write nothing

  // This block's rows: b, b + G, ... of [tokens, H].
  const long long row_bytes = rows.row_bytes;
  const long long total_rows = rows.tokens * rows.heads;
  const long long my_rows = total_rows > b ? (total_rows - b + gridDim.x - 1) / gridDim.x : 0;
  const int units = static_cast<int>(row_bytes / static_cast<long long>(sizeof(Unit)));
  for (long long i = threadIdx.x; i < my_rows * units; i += blockDim.x) {
    const long long row = b + (i / units) * gridDim.x;
    const Placement p = place(row, rows, cp);
    if (fused && p.owner == me) continue;  // combined in place below
    const int u = static_cast<int>(i % units);
    const auto* src = reinterpret_cast<const Unit*>(partial + row * row_bytes);
    auto* dst = reinterpret_cast<Unit*>(static_cast<std::uint8_t*>(links.recv_partial[p.owner]) +
                                        slot_row(p, me, rows.tokens) * row_bytes);
    dst[u] = src[u];
  }
  for (long long i = threadIdx.x; i < 2 * my_rows; i += blockDim.x) {
    const long long row = b + (i / 2) * gridDim.x;
    const Placement p = place(row, rows, cp);
    if (fused && p.owner == me) continue;
    links.recv_stats[p.owner][2 * slot_row(p, me, rows.tokens) + (i % 2)] = stats[2 * row + (i % 2)];
  }
  __threadfence_system();
  __syncthreads();

  if (signals) store_release(&links.flags[peer]->done[me][b], epoch);
  if (signals && !wait_for(&mine->done[peer][b], epoch, timeout_ns, links)) gave_up = 1;
  __syncthreads();
  if (threadIdx.x == 0) mine->epoch[b] = epoch;
  if (!fused || gave_up) return;

  const auto* local = reinterpret_cast<const Storage*>(partial);
  const auto* received = static_cast<const Storage*>(links.recv_partial[me]);
  const float* received_stats = links.recv_stats[me];
  for (long long k = 0; k < my_rows; ++k) {
    const long long row = b + k * gridDim.x;
    const Placement p = place(row, rows, cp);
    if (p.owner != me) continue;
    auto source = [&](int i) {
      if (i == me) return cuda::PartialRow<Partial>{local + row * rows.width, stats + 2 * row};
      const long long r = slot_row(p, i, rows.tokens);
      return cuda::PartialRow<Partial>{received + r * rows.width, received_stats + 2 * r};
    };
    const long long out_row = p.token * p.count + (p.head - p.begin);
    cuda::helix_combine_row<Partial, Partial>(
        cp, rows.width, source, static_cast<Storage*>(combine.out) + out_row * rows.width,
        combine.out_stats != nullptr ? combine.out_stats + 2 * out_row : nullptr);
  }
}

template <DType Partial>
void launch_typed(const Links& links, const Rows& rows, const std::uint8_t* partial, const float* stats,
                  const Combine& combine, std::uint64_t timeout_ns, cudaStream_t stream) {
  bool vector_aligned = rows.row_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(partial) % 16 == 0;
  for (int r = 0; r < links.cp; ++r) {
    vector_aligned = vector_aligned && reinterpret_cast<std::uintptr_t>(links.recv_partial[r]) % 16 == 0;
  }
  const unsigned blocks = static_cast<unsigned>(grid_blocks(rows));
  if (vector_aligned) {
    exchange_kernel<Partial, uint4><<<blocks, kThreads, 0, stream>>>(links, rows, partial, stats, combine, timeout_ns);
  } else {
    exchange_kernel<Partial, std::uint8_t>
        <<<blocks, kThreads, 0, stream>>>(links, rows, partial, stats, combine, timeout_ns);
  }
  HELIXMLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

int grid_blocks(const Rows& rows) {
  const long long total_rows = rows.tokens * rows.heads;
  return static_cast<int>(std::clamp<long long>((total_rows + 1) / 2, 1, kMaxBlocks));
}

void launch(const Links& links, const Rows& rows, const void* partial, const float* stats,
            const Combine& combine, std::uint64_t timeout_ns, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* src = static_cast<const std::uint8_t*>(partial);
  switch (rows.dtype) {
    case DType::bf16: return launch_typed<DType::bf16>(links, rows, src, stats, combine, timeout_ns, s);
    case DType::fp16: return launch_typed<DType::fp16>(links, rows, src, stats, combine, timeout_ns, s);
    case DType::fp32: return launch_typed<DType::fp32>(links, rows, src, stats, combine, timeout_ns, s);
    case DType::fp8_e4m3: break;
  }
  throw InvalidArgument("partial_dtype", -1, std::string(to_string(rows.dtype)),
                        "partial outputs are fp32, bf16 or fp16");
}

}  // namespace helixmla::dist::peer

// See peer_exchange_kernel.hpp for the protocol.
#include "cuda/peer_exchange_kernel.hpp"

#include <algorithm>
#include <cstdint>

#include "cuda/dependent_launch.cuh"
#include "cuda/dependent_launch.hpp"
#include "cuda/head_owner.cuh"

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
      // Every rank stops, so no late peer writes into buffers its owner
      // has given up on (and may free).
      for (int r = 0; r < links.cp; ++r) *static_cast<volatile std::uint32_t*>(&links.flags[r]->error) = 1u;
      *static_cast<volatile std::uint32_t*>(links.host_error) = 1u;
      __threadfence_system();
      return false;
    }
  }
  return true;
}

template <typename Unit>
__global__ void __launch_bounds__(kThreads)
exchange_kernel(Links links, Rows rows, const std::uint8_t* partial, const float* stats,
                std::uint64_t timeout_ns) {
  const int b = blockIdx.x;
  const int cp = links.cp;
  const int me = links.rank;
  Flags* mine = links.flags[me];
  // Volatile: this SM may hold the line from a previous launch's block.
  const std::uint32_t epoch = *static_cast<volatile std::uint32_t*>(&mine->epoch[b]) + 1;
  const int peer = threadIdx.x;
  const bool signals = peer < cp && peer != me;
  __shared__ int gave_up;
  if (threadIdx.x == 0) gave_up = 0;
  __syncthreads();

  // Launched early (dependent_launch.hpp): the handshake overlaps the end of
  // the kernel that writes `partial`, which is read only after the wait.
  if (signals) store_release(&links.flags[peer]->ready[me][b], epoch);
  if (signals && !wait_for(&mine->ready[peer][b], epoch, timeout_ns, links)) gave_up = 1;
  __syncthreads();
  if (gave_up) return;  // a peer's slot may still be in use: write nothing
  cuda::wait_for_previous_grid();

  // Rows b, b + G, ... of [tokens, H], each to its head's owner.
  const long long total_rows = rows.tokens * rows.heads;
  const long long my_rows = total_rows > b ? (total_rows - b + gridDim.x - 1) / gridDim.x : 0;
  const int units = static_cast<int>(rows.row_bytes / static_cast<long long>(sizeof(Unit)));
  auto destination = [&](long long row, long long* slot_row) {
    const long long token = row / rows.heads;
    const int head = static_cast<int>(row % rows.heads);
    const cuda::HeadOwner owner = cuda::head_owner(head, rows.heads, cp);
    *slot_row = (me * rows.tokens + token) * owner.count + (head - owner.begin);
    return owner.rank;
  };
  for (long long i = threadIdx.x; i < my_rows * units; i += blockDim.x) {
    const long long row = b + (i / units) * gridDim.x;
    const int u = static_cast<int>(i % units);
    long long slot_row = 0;
    const int owner = destination(row, &slot_row);
    const auto* src = reinterpret_cast<const Unit*>(partial + row * rows.row_bytes);
    auto* dst = reinterpret_cast<Unit*>(static_cast<std::uint8_t*>(links.recv_partial[owner]) +
                                        slot_row * rows.row_bytes);
    dst[u] = src[u];
  }
  for (long long i = threadIdx.x; i < 2 * my_rows; i += blockDim.x) {
    const long long row = b + (i / 2) * gridDim.x;
    long long slot_row = 0;
    const int owner = destination(row, &slot_row);
    links.recv_stats[owner][2 * slot_row + (i % 2)] = stats[2 * row + (i % 2)];
  }
  __threadfence_system();
  __syncthreads();

  if (signals) store_release(&links.flags[peer]->done[me][b], epoch);
  if (signals) wait_for(&mine->done[peer][b], epoch, timeout_ns, links);
  __syncthreads();
  if (threadIdx.x == 0) {
    *static_cast<volatile std::uint32_t*>(&mine->epoch[b]) = epoch;
    __threadfence();
  }
  __syncthreads();
  // Only now: a kernel launched early behind this one (the combine, or
  // another exchange) reads this block's epoch before it waits for the grid.
  cuda::allow_next_grid();
}

// Blocks every rank launches for this shape: the same on every rank, since
// block b trades its flags with block b of every peer.
int grid_blocks(const Rows& rows) {
  const long long total_rows = rows.tokens * rows.heads;
  return static_cast<int>(std::clamp<long long>((total_rows + 1) / 2, 1, kMaxBlocks));
}

}  // namespace

void launch(const Links& links, const Rows& rows, const void* partial, const float* stats,
            std::uint64_t timeout_ns, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* src = static_cast<const std::uint8_t*>(partial);
  bool vector_aligned = rows.row_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0;
  for (int r = 0; r < links.cp; ++r) {
    vector_aligned = vector_aligned && reinterpret_cast<std::uintptr_t>(links.recv_partial[r]) % 16 == 0;
  }
  const unsigned blocks = static_cast<unsigned>(grid_blocks(rows));
  if (vector_aligned) {
    cuda::launch_early(exchange_kernel<uint4>, blocks, kThreads, s, links, rows, src, stats, timeout_ns);
  } else {
    cuda::launch_early(exchange_kernel<std::uint8_t>, blocks, kThreads, s, links, rows, src, stats, timeout_ns);
  }
}

}  // namespace helixmla::dist::peer

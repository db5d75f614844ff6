// See peer_exchange_kernel.hpp for the protocol.
#include "cuda/peer_exchange_kernel.hpp"

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/dependent_launch.hpp"

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

__device__ __forceinline__ std::uint64_t load_relaxed(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Flags the timeout for the host and for this rank's other blocks.
__device__ void give_up(const Links& links) {
  atomicExch(&links.flags[links.rank]->error, 1u);
  *static_cast<volatile std::uint32_t*>(links.host_error) = 1u;
  __threadfence_system();
}

__device__ __forceinline__ bool rank_gave_up(const Links& links) {
  return *static_cast<volatile std::uint32_t*>(&links.flags[links.rank]->error) != 0;
}

// Spins until *flag has reached `epoch` (wrap-around safe); false on timeout
// or once another block of this rank has given up.
__device__ bool wait_for(const std::uint32_t* flag, std::uint32_t epoch, std::uint64_t timeout_ns,
                         const Links& links) {
  const std::uint64_t start = global_ns();
  while (static_cast<std::int32_t>(load_acquire(flag) - epoch) < 0) {
    if (rank_gave_up(links)) return false;
    if (global_ns() - start > timeout_ns) {
      give_up(links);
      return false;
    }
  }
  return true;
}

// Where row (token, head) of the [tokens, H] output goes: its owner and its
// row within the owner's slot of a given source.
struct Placement {
  int owner;
  long long begin;  // owner's first head
  long long count;  // owner's head count
  long long token;
  int head;
  __device__ long long slot_row(int source, long long tokens) const {
    return (source * tokens + token) * count + (head - begin);
  }
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

__global__ void __launch_bounds__(kThreads)
exchange_kernel(Links links, Rows rows, const std::uint32_t* partial, const float* stats,
                std::uint64_t timeout_ns) {
  const int b = blockIdx.x;
  const int cp = links.cp;
  const int me = links.rank;
  Flags* mine = links.flags[me];
  // Volatile: a block of the previous launch may have run on this SM, and
  // the last one of them wrote the count.
  const std::uint32_t epoch = *static_cast<volatile std::uint32_t*>(&mine->launches) + 1;
  const int peer = threadIdx.x;
  const bool signals = peer < cp && peer != me;
  __shared__ int gave_up;
  if (threadIdx.x == 0) gave_up = 0;
  __syncthreads();

  if (signals) store_release(&links.flags[peer]->ready[me][b], epoch);
  if (signals && !wait_for(&mine->ready[peer][b], epoch, timeout_ns, links)) gave_up = 1;
  __syncthreads();
  if (gave_up) return;  // a peer's buffers may still be in use: write nothing
  cuda::wait_for_previous_grid();

  const long long row_words = rows.row_bytes / 4;
  const long long words = row_words + 2;
  const long long total_rows = rows.tokens * rows.heads;
  const long long my_rows = total_rows > b ? (total_rows - b + gridDim.x - 1) / gridDim.x : 0;
  const std::uint64_t tag = static_cast<std::uint64_t>(epoch) << 32;

  for (long long i = threadIdx.x; i < my_rows * words; i += blockDim.x) {
    const long long row = b + (i / words) * gridDim.x;
    const long long w = i % words;
    const Placement p = place(row, rows, cp);
    const std::uint32_t value =
        w < row_words ? partial[row * row_words + w] : __float_as_uint(stats[2 * row + (w - row_words)]);
    const long long slot = p.slot_row(me, rows.tokens);
    if (p.owner != me) {
      links.landing[p.owner][slot * words + w] = tag | value;
    } else if (w < row_words) {
      static_cast<std::uint32_t*>(links.recv_partial[me])[slot * row_words + w] = value;
    } else {
      links.recv_stats[me][2 * slot + (w - row_words)] = __uint_as_float(value);
    }
  }

  const std::uint64_t start = global_ns();
  bool waiting = true;
  for (long long i = threadIdx.x; i < my_rows * words && waiting; i += blockDim.x) {
    const long long row = b + (i / words) * gridDim.x;
    const long long w = i % words;
    const Placement p = place(row, rows, cp);
    if (p.owner != me) continue;
    for (int source = 0; source < cp && waiting; ++source) {
      if (source == me) continue;
      const long long slot = p.slot_row(source, rows.tokens);
      const std::uint64_t* word = links.landing[me] + slot * words + w;
      std::uint64_t v = load_relaxed(word);
      while ((v & 0xffffffff00000000ull) != tag) {
        if (rank_gave_up(links)) {
          waiting = false;
          break;
        }
        if (global_ns() - start > timeout_ns) {
          give_up(links);
          waiting = false;
          break;
        }
        v = load_relaxed(word);
      }
      if (!waiting) break;
      const auto value = static_cast<std::uint32_t>(v);
      if (w < row_words) {
        static_cast<std::uint32_t*>(links.recv_partial[me])[slot * row_words + w] = value;
      } else {
        links.recv_stats[me][2 * slot + (w - row_words)] = __uint_as_float(value);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&mine->finished, 1u) == gridDim.x - 1) {
      mine->finished = 0;
      *static_cast<volatile std::uint32_t*>(&mine->launches) = epoch;
    }
  }
}

}  // namespace

int grid_blocks(const Rows& rows) {
  const long long total_rows = rows.tokens * rows.heads;
  return static_cast<int>(std::clamp<long long>((total_rows + 1) / 2, 1, kMaxBlocks));
}

void launch(const Links& links, const Rows& rows, const void* partial, const float* stats,
            std::uint64_t timeout_ns, void* stream) {
  const unsigned blocks = static_cast<unsigned>(grid_blocks(rows));
  cuda::launch_maybe_early(true, exchange_kernel, blocks, kThreads, static_cast<cudaStream_t>(stream), links,
                           rows, static_cast<const std::uint32_t*>(partial), stats, timeout_ns);
}

}  // namespace helixmla::dist::peer

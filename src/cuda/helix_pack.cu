// Device repacking of a rank's attention output into its Helix send buffers
// (layout in dist/exchange.hpp): one kernel for every peer, partials and
// stats, so a decode step pays one launch instead of two copies per peer.
// The rank's own heads go straight into its receive slot.
#include <cstdint>
#include <string>

#include "cuda/kernel_launch.hpp"
#include "cuda/head_owner.cuh"
#include "dist/exchange.hpp"
#include "helixmla/error.hpp"

namespace helixmla::dist {

namespace {

struct PackGeometry {
  int cp;
  int rank;
  int heads;
  long long tokens;
  long long row_bytes;  // one head's partial: width * element size
  long long self_offset;  // rows from the receive buffer's start to slot `rank`
};

template <typename Unit>
__global__ void pack_kernel(const std::uint8_t* partial, const float* stats, std::uint8_t* send,
                            float* send_stats, std::uint8_t* recv, float* recv_stats, PackGeometry g) {
  const long long row = blockIdx.x;  // token * heads + head
  const long long token = row / g.heads;
  const int head = static_cast<int>(row % g.heads);
  const cuda::HeadOwner owner = cuda::head_owner(head, g.heads, g.cp);
  const bool mine = owner.rank == g.rank;
  const long long chunk_row =
      (mine ? g.self_offset : g.tokens * owner.begin) + token * owner.count + (head - owner.begin);
  if (mine) {
    send = recv;
    send_stats = recv_stats;
  }

  const auto* src = reinterpret_cast<const Unit*>(partial + row * g.row_bytes);
  auto* dst = reinterpret_cast<Unit*>(send + chunk_row * g.row_bytes);
  const long long units = g.row_bytes / static_cast<long long>(sizeof(Unit));
  for (long long i = threadIdx.x; i < units; i += blockDim.x) dst[i] = src[i];
  if (threadIdx.x < 2) send_stats[2 * chunk_row + threadIdx.x] = stats[2 * row + threadIdx.x];
}

}  // namespace

void pack_send_device(const ExchangeShape& shape, const RankBuffers& b) {
  const long long rows = shape.tokens * shape.heads;
  if (rows == 0) return;
  if (rows > 0x7fffffffLL) {
    throw InvalidArgument("tokens", -1, std::to_string(shape.tokens),
                          "tokens * heads must stay below 2^31 per pack");
  }
  const long long mine = shape.heads_of(b.rank).count;
  const PackGeometry g{shape.cp, b.rank, shape.heads, shape.tokens,
                       static_cast<long long>(shape.width) * static_cast<long long>(shape.element_bytes()),
                       b.rank * shape.tokens * mine};
  const auto s = static_cast<cudaStream_t>(b.stream);
  const auto* src = static_cast<const std::uint8_t*>(b.partial);
  auto* send = static_cast<std::uint8_t*>(b.send_partial);
  auto* recv = static_cast<std::uint8_t*>(b.recv_partial);
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vector_aligned = g.row_bytes % 16 == 0 && aligned(src) && aligned(send) && aligned(recv);
  constexpr int kThreads = 64;
  if (vector_aligned) {
    cuda::launch_kernel(pack_kernel<uint4>, static_cast<unsigned>(rows), kThreads, 0, s, src, b.partial_stats, send,
                        b.send_stats, recv, b.recv_stats, g);
  } else {
    cuda::launch_kernel(pack_kernel<std::uint8_t>, static_cast<unsigned>(rows), kThreads, 0, s, src,
                        b.partial_stats, send, b.send_stats, recv, b.recv_stats, g);
  }
}

}  // namespace helixmla::dist

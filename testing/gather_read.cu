#include "gather_read.hpp"

#include <string>

#include "helixmla/error.hpp"

namespace helixmla::testing {

namespace {

// The attention kernels' memory pipeline without their math: tiles of 32
// rows gathered with 16-byte cp.async (L2 only) into shared memory, four
// tiles in flight, one block per SM streaming a contiguous share of the
// rows. Nothing reads the copies; the copies are the point.
constexpr int kThreads = 256;
constexpr int kTileRows = 32;
constexpr int kStages = 4;

__global__ void __launch_bounds__(kThreads)
    gather_read_kernel(const uint4* pool, const std::int32_t* rows, long long count, int row_chunks,
                       long long rows_per_block) {
  extern __shared__ uint4 stages[];
  const long long first = static_cast<long long>(blockIdx.x) * rows_per_block;
  const long long end = first + rows_per_block < count ? first + rows_per_block : count;
  const int tile_chunks = kTileRows * row_chunks;
  int tile = 0;
  for (long long t0 = first; t0 < end; t0 += kTileRows, ++tile) {
    uint4* stage = stages + (tile % kStages) * tile_chunks;
    for (int i = threadIdx.x; i < tile_chunks; i += kThreads) {
      const long long r = t0 + i / row_chunks;
      if (r < end) {
        const uint4* src = pool + static_cast<long long>(rows[r]) * row_chunks + i % row_chunks;
        const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(stage + i));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
}

}  // namespace

std::vector<std::int32_t> gathered_rows(const Problem& p) {
  std::vector<std::int32_t> rows;
  for (std::int32_t r = 0; r < p.num_requests(); ++r) {
    const std::int32_t kv = p.kv_len[static_cast<std::size_t>(r)];
    const std::int32_t* pages = p.page_table.data() + static_cast<std::size_t>(r) * p.page_table_stride;
    for (std::int32_t t = 0; t < kv; ++t) {
      rows.push_back(pages[t / p.kv.page_size] * p.kv.page_size + t % p.kv.page_size);
    }
  }
  return rows;
}

void enqueue_gather_read(const void* pool, const std::int32_t* rows, std::int64_t count, int row_bytes,
                         int blocks, cudaStream_t stream) {
  if (row_bytes <= 0 || row_bytes % 16 != 0) {
    throw InvalidArgument("row_bytes", -1, std::to_string(row_bytes), "must be a positive multiple of 16");
  }
  if (count <= 0 || blocks <= 0) return;
  const int smem = kStages * kTileRows * row_bytes;
  cudaError_t status = cudaFuncSetAttribute(gather_read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (status == cudaSuccess) {
    const long long rows_per_block = (count + blocks - 1) / blocks;
    gather_read_kernel<<<blocks, kThreads, smem, stream>>>(static_cast<const uint4*>(pool), rows, count,
                                                           row_bytes / 16, rows_per_block);
    status = cudaGetLastError();
  }
  if (status != cudaSuccess) {
    throw RuntimeFailure(std::string("gather_read_kernel launch: ") + cudaGetErrorString(status));
  }
}

}  // namespace helixmla::testing

// A read-only pass over the KV rows a batch's attention reads, gathered
// through its page table in the same order: the ceiling for any kernel that
// must read them (`helixmla bench --gather`). Sequential copy bandwidth
// overstates what a gather of small pages can reach; this measures the
// pattern itself, with no math behind it.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "helixmla/problem.hpp"

namespace helixmla::testing {

// Pool rows (page * page_size + slot) of every cached token of `p`'s
// requests, request by request in token order. `p`'s page table is on the host.
std::vector<std::int32_t> gathered_rows(const Problem& p);

// Enqueues one read of the `count` rows listed at `rows` (device memory),
// each `row_bytes` long (a multiple of 16) in `pool`, on `blocks` blocks
// (one per SM is the attention kernels' shape); block b reads a contiguous
// share of the list, as an attention block reads a token range.
void enqueue_gather_read(const void* pool, const std::int32_t* rows, std::int64_t count, int row_bytes, int blocks,
                         cudaStream_t stream);

}  // namespace helixmla::testing

#endif

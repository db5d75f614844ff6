// A read-only pass over the KV rows a batch's attention reads, gathered
// through its page table in the same order: the ceiling for any kernel that
// must read them (`helixmla bench --gather`), the access pattern with no
// math behind it. On an H200 it reached the copy bandwidth at every page
// size, token pages included (bench/RESULTS.md, session 8).
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
// each `row_bytes` long (576 or 1152) in `pool`, with plain loads at full
// occupancy on `sms` SMs. `sink` (16 bytes of device memory) keeps the
// loads alive and is written only on a one-in-2^64 pattern.
void enqueue_gather_read(const void* pool, const std::int32_t* rows, std::int64_t count, int row_bytes, int sms,
                         void* sink, cudaStream_t stream);

}  // namespace helixmla::testing

#endif

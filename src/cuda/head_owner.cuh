// Which Helix rank owns a head, on the device: rank p holds heads
// [p H / cp, (p + 1) H / cp) (helix_heads_of_rank), so the owner of head h
// is the p with p H / cp <= h < (p + 1) H / cp. Shared by the kernels that
// route each head's row to its owner's receive slot (helix_pack.cu,
// peer_exchange_kernel.cu).
#pragma once

namespace helixmla::cuda {

struct HeadOwner {
  int rank;
  long long begin;  // the owner's first head
  long long count;  // heads it holds
};

__device__ __forceinline__ HeadOwner head_owner(int head, int heads, int cp) {
  const int rank = static_cast<int>(((static_cast<long long>(head) + 1) * cp - 1) / heads);
  const long long begin = static_cast<long long>(rank) * heads / cp;
  const long long count = static_cast<long long>(rank + 1) * heads / cp - begin;
  return {rank, begin, count};
}

}  // namespace helixmla::cuda

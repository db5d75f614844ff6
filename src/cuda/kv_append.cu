// Device Helix KV append: one block per new token; tokens whose page another
// rank owns (destination -1) return at once. The destinations are in device
// memory, where the host cannot check them without a synchronisation: a row
// outside the pool is skipped, never written past it.
#include <string>

#include "cuda/kernel_launch.hpp"
#include "cuda/helix_dtype.cuh"
#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {

namespace {

template <DType In, DType Cache>
__global__ void kv_append_kernel(const typename cuda::DeviceElement<In>::Storage* rows,
                                 typename cuda::DeviceElement<Cache>::Storage* pool,
                                 const std::int64_t* destinations, long long pool_rows, int width, float scale) {
  const long long token = blockIdx.x;
  const long long row = destinations[token];
  if (row < 0 || row >= pool_rows) return;
  for (int k = threadIdx.x; k < width; k += blockDim.x) {
    const float value = cuda::DeviceElement<In>::load(rows, token * width + k);
    cuda::DeviceElement<Cache>::store(pool, row * width + k, value / scale);
  }
}

template <DType In, DType Cache>
void launch(const KvAppendArgs& a, cudaStream_t stream) {
  using InStorage = typename cuda::DeviceElement<In>::Storage;
  using CacheStorage = typename cuda::DeviceElement<Cache>::Storage;
  constexpr int kThreads = 128;
  cuda::launch_kernel(kv_append_kernel<In, Cache>, static_cast<unsigned>(a.tokens), kThreads, 0, stream,
                      static_cast<const InStorage*>(a.new_rows), static_cast<CacheStorage*>(a.pool), a.destinations,
                      static_cast<long long>(a.num_pages) * a.page_size, a.row_width, a.kv_scale);
}

template <DType In>
void launch_for_cache(const KvAppendArgs& a, cudaStream_t stream) {
  switch (a.kv_dtype) {
    case DType::bf16: return launch<In, DType::bf16>(a, stream);
    case DType::fp16: return launch<In, DType::fp16>(a, stream);
    case DType::fp8_e4m3: return launch<In, DType::fp8_e4m3>(a, stream);
    case DType::fp32: return launch<In, DType::fp32>(a, stream);
  }
  throw InvalidArgument("kv_dtype", -1, std::string(to_string(a.kv_dtype)), "unknown cache dtype");
}

}  // namespace

void kv_append_device(const KvAppendArgs& args, void* stream) {
  check_kv_append_args(args);
  if (args.tokens == 0) return;
  if (args.tokens > 0x7fffffffLL) {
    throw InvalidArgument("tokens", -1, std::to_string(args.tokens), "at most 2^31 - 1 per call");
  }
  auto s = static_cast<cudaStream_t>(stream);
  switch (args.new_dtype) {
    case DType::bf16: return launch_for_cache<DType::bf16>(args, s);
    case DType::fp16: return launch_for_cache<DType::fp16>(args, s);
    case DType::fp32: return launch_for_cache<DType::fp32>(args, s);
    case DType::fp8_e4m3: break;
  }
  throw InvalidArgument("new_dtype", -1, std::string(to_string(args.new_dtype)),
                        "new KV rows are bf16, fp16 or fp32");
}

}  // namespace helixmla

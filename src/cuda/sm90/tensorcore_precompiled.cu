// The precompiled tensor-core variants: every row tile (on its default
// engine, the 64-row seesaw build of 16-bit KV, the 32-row fp8 two-block
// build and the 16- and 48-row fp8-steps builds) for bf16 Q with bf16 or fp8 KV, at
// the page sizes of kTensorcorePrecompiledPages.
#include "cuda/tensorcore_kernel.cuh"
#include "cuda/tensorcore_precompiled.hpp"

namespace helixmla::cuda {

namespace {

template <int M, int KV, int ENGINE, int BLOCKS = 0>
const void* for_page(int page) {
  using helixmla_tc::kElemBf16;
  using helixmla_tc::mla_decode_kernel;
  static_assert(kTensorcorePrecompiledPages.size() == 4, "one case per precompiled page size");
  switch (page) {
    case kTensorcorePrecompiledPages[0]:
      return reinterpret_cast<const void*>(&mla_decode_kernel<M, kTensorcorePrecompiledPages[0], kElemBf16, KV, ENGINE, BLOCKS>);
    case kTensorcorePrecompiledPages[1]:
      return reinterpret_cast<const void*>(&mla_decode_kernel<M, kTensorcorePrecompiledPages[1], kElemBf16, KV, ENGINE, BLOCKS>);
    case kTensorcorePrecompiledPages[2]:
      return reinterpret_cast<const void*>(&mla_decode_kernel<M, kTensorcorePrecompiledPages[2], kElemBf16, KV, ENGINE, BLOCKS>);
    case kTensorcorePrecompiledPages[3]:
      return reinterpret_cast<const void*>(&mla_decode_kernel<M, kTensorcorePrecompiledPages[3], kElemBf16, KV, ENGINE, BLOCKS>);
    default:
      return nullptr;
  }
}

template <int KV>
const void* for_rows(const TensorcoreVariant& v) {
  const int page = v.page_size;
  switch (v.rows) {
    case 16:
      if constexpr (KV == helixmla_tc::kKvFp8) {
        if (v.engine == TensorcoreEngine::fp8_steps) return for_page<16, KV, helixmla_tc::kEngineFp8Steps>(page);
      }
      return for_page<16, KV, helixmla_tc::kEngineMmaSync>(page);
    case 32:
      if constexpr (KV == helixmla_tc::kKvFp8) {
        if (v.two_blocks) return for_page<32, KV, helixmla_tc::kEngineMmaSync, 2>(page);
      }
      return for_page<32, KV, helixmla_tc::kEngineMmaSync>(page);
    case kTensorcoreFp8StepsWideRows:
      if constexpr (KV == helixmla_tc::kKvFp8) {
        if (v.engine == TensorcoreEngine::fp8_steps) {
          return for_page<kTensorcoreFp8StepsWideRows, KV, helixmla_tc::kEngineFp8Steps>(page);
        }
      }
      return nullptr;
    case 64:
      if constexpr (KV != helixmla_tc::kKvFp8) {
        if (v.engine == TensorcoreEngine::seesaw) return for_page<64, KV, helixmla_tc::kEngineSeesaw>(page);
      }
      return for_page<64, KV, static_cast<int>(tensorcore_default_engine(64))>(page);
    default: return nullptr;
  }
}

}  // namespace

const void* tensorcore_precompiled_kernel(const TensorcoreVariant& variant) {
  if (!variant.precompiled()) return nullptr;
  return variant.kv_dtype == DType::fp8_e4m3 ? for_rows<helixmla_tc::kKvFp8>(variant)
                                              : for_rows<helixmla_tc::kKvSameAsQ>(variant);
}

}  // namespace helixmla::cuda

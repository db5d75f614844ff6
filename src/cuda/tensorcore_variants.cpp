#include "cuda/tensorcore_variants.hpp"

#include <algorithm>

#include "cuda/tensorcore_kernel.cuh"

namespace helixmla::cuda {

bool TensorcoreVariant::precompiled() const {
  const bool page = std::find(kTensorcorePrecompiledPages.begin(), kTensorcorePrecompiledPages.end(),
                              page_size) != kTensorcorePrecompiledPages.end();
  return page && q_dtype == DType::bf16 &&
         (kv_dtype == DType::bf16 || kv_dtype == DType::fp8_e4m3);
}

int TensorcoreVariant::elem_kind() const {
  return q_dtype == DType::fp16 ? helixmla_tc::kElemFp16 : helixmla_tc::kElemBf16;
}

int TensorcoreVariant::kv_kind() const {
  return kv_dtype == DType::fp8_e4m3 ? helixmla_tc::kKvFp8 : helixmla_tc::kKvSameAsQ;
}

namespace {

template <int M>
int smem_for(int kv) {
  return kv == helixmla_tc::kKvFp8 ? helixmla_tc::Config<M, helixmla_tc::kKvFp8>::kSmemBytes
                                   : helixmla_tc::Config<M, helixmla_tc::kKvSameAsQ>::kSmemBytes;
}

}  // namespace

int TensorcoreVariant::smem_bytes() const {
  if (rows == 16) return smem_for<16>(kv_kind());
  if (rows == 32) return smem_for<32>(kv_kind());
  return smem_for<64>(kv_kind());
}

int TensorcoreVariant::blocks_per_sm() const {
  return rows == 16 ? helixmla_tc::Config<16, 0>::kBlocksPerSm : 1;
}

std::string TensorcoreVariant::name() const {
  return "tc_m" + std::to_string(rows) + "_p" + std::to_string(page_size) + "_" +
         std::string(to_string(q_dtype)) + "_" + std::string(to_string(kv_dtype));
}

std::int32_t tensorcore_row_tile(std::int32_t heads, std::int32_t q_len) {
  if (q_len <= 0) return 64;
  const std::int64_t rows = std::int64_t{heads} * q_len;
  for (std::int32_t tile : kTensorcoreRowTiles) {
    if (rows <= tile) return tile;
  }
  return 64;
}

TensorcoreVariant tensorcore_variant_for(const PhaseShape& shape) {
  TensorcoreVariant v;
  v.rows = tensorcore_row_tile(shape.num_heads, shape.q_len);
  v.page_size = shape.page_size;
  v.q_dtype = shape.q_dtype;
  v.kv_dtype = shape.kv_dtype;
  return v;
}

}  // namespace helixmla::cuda

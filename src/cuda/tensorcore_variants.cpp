#include "cuda/tensorcore_variants.hpp"

#include <algorithm>

#include "cuda/tensorcore_kernel.cuh"

namespace helixmla::cuda {

bool TensorcoreVariant::precompiled() const {
  const bool page = std::find(kTensorcorePrecompiledPages.begin(), kTensorcorePrecompiledPages.end(),
                              page_size) != kTensorcorePrecompiledPages.end();
  return page && q_dtype == DType::bf16 &&
         (kv_dtype == DType::bf16 || kv_dtype == DType::fp8_e4m3) &&
         wgmma == (rows == 64 && kTensorcoreWgmmaFor64Rows);
}

int TensorcoreVariant::elem_kind() const {
  return q_dtype == DType::fp16 ? helixmla_tc::kElemFp16 : helixmla_tc::kElemBf16;
}

int TensorcoreVariant::kv_kind() const {
  return kv_dtype == DType::fp8_e4m3 ? helixmla_tc::kKvFp8 : helixmla_tc::kKvSameAsQ;
}

int TensorcoreVariant::engine_kind() const {
  return wgmma ? helixmla_tc::kEngineWgmma : helixmla_tc::kEngineMmaSync;
}

namespace {

template <int M, int ENGINE>
int smem_for(int kv) {
  return kv == helixmla_tc::kKvFp8 ? helixmla_tc::Config<M, helixmla_tc::kKvFp8, ENGINE>::kSmemBytes
                                   : helixmla_tc::Config<M, helixmla_tc::kKvSameAsQ, ENGINE>::kSmemBytes;
}

template <int M>
int blocks_for(int kv) {
  return kv == helixmla_tc::kKvFp8 ? helixmla_tc::Config<M, helixmla_tc::kKvFp8>::kBlocksPerSm
                                   : helixmla_tc::Config<M, helixmla_tc::kKvSameAsQ>::kBlocksPerSm;
}

}  // namespace

int TensorcoreVariant::smem_bytes() const {
  if (rows == 16) return smem_for<16, helixmla_tc::kEngineMmaSync>(kv_kind());
  if (rows == 32) return smem_for<32, helixmla_tc::kEngineMmaSync>(kv_kind());
  return wgmma ? smem_for<64, helixmla_tc::kEngineWgmma>(kv_kind())
               : smem_for<64, helixmla_tc::kEngineMmaSync>(kv_kind());
}

int TensorcoreVariant::blocks_per_sm() const {
  if (rows == 16) return blocks_for<16>(kv_kind());
  if (rows == 32) return blocks_for<32>(kv_kind());
  return 1;
}

std::string TensorcoreVariant::name() const {
  return "tc_m" + std::to_string(rows) + "_p" + std::to_string(page_size) + "_" +
         std::string(to_string(q_dtype)) + "_" + std::string(to_string(kv_dtype)) +
         (wgmma ? "_wgmma" : "");
}

std::int32_t tensorcore_row_tile(std::int32_t heads, std::int32_t q_len, DType kv_dtype,
                                 std::int32_t batch_bucket) {
  if (q_len <= 0) return 64;
  const std::int64_t rows = std::int64_t{heads} * q_len;
  for (std::int32_t tile : kTensorcoreRowTiles) {
    if (rows > tile) continue;
    const bool padded_wgmma = tile == 32 && kTensorcoreWgmmaFor64Rows && kv_dtype != DType::fp8_e4m3 &&
                              batch_bucket >= kWgmmaFor32RowsFromBatch;
    return padded_wgmma ? 64 : tile;
  }
  return 64;
}

TensorcoreVariant tensorcore_variant_for(const PhaseShape& shape) {
  TensorcoreVariant v;
  v.rows = tensorcore_row_tile(shape.num_heads, shape.q_len, shape.kv_dtype, shape.batch_bucket);
  v.page_size = shape.page_size;
  v.q_dtype = shape.q_dtype;
  v.kv_dtype = shape.kv_dtype;
  v.wgmma = v.rows == 64 && kTensorcoreWgmmaFor64Rows;
  return v;
}

}  // namespace helixmla::cuda

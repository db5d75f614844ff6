// Argument rules shared by the host and device twins of the Helix KV append
// and combine, so both reject the same inputs with the same message.
#include <cmath>
#include <string>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {

namespace {

void require(bool ok, const char* field, const std::string& value, const char* rule) {
  if (!ok) throw InvalidArgument(field, -1, value, rule);
}

std::string name(DType dtype) { return std::string(to_string(dtype)); }

bool is_16bit_float(DType dtype) { return dtype == DType::bf16 || dtype == DType::fp16; }

}  // namespace

void check_kv_append_args(const KvAppendArgs& a) {
  require(a.tokens >= 0, "tokens", std::to_string(a.tokens), "must be >= 0");
  require(a.page_size >= 1, "page_size", std::to_string(a.page_size), "must be at least 1");
  require(a.row_width >= 1, "row_width", std::to_string(a.row_width), "must be at least 1");
  require(a.num_pages >= 0, "num_pages", std::to_string(a.num_pages), "must be >= 0");
  require(is_16bit_float(a.new_dtype) || a.new_dtype == DType::fp32, "new_dtype", name(a.new_dtype),
          "new KV rows are bf16, fp16 or fp32");
  require(std::isfinite(a.kv_scale) && a.kv_scale > 0.0f, "kv_scale", std::to_string(a.kv_scale),
          "must be finite and positive");
  if (a.tokens == 0) return;
  require(a.pool != nullptr, "pool", "null", "must point to the paged cache");
  require(a.new_rows != nullptr, "new_rows", "null", "must point to [tokens, row_width] rows");
  require(a.destinations != nullptr, "destinations", "null",
          "must hold one pool row (or -1) per token");
}

void check_helix_combine_args(const HelixCombineArgs& a) {
  require(a.cp >= 1, "cp", std::to_string(a.cp), "must be at least 1");
  require(a.tokens >= 0, "tokens", std::to_string(a.tokens), "must be >= 0");
  require(a.heads >= 0, "heads", std::to_string(a.heads), "must be >= 0");
  require(a.width >= 1, "width", std::to_string(a.width), "must be at least 1");
  require(is_16bit_float(a.partial_dtype) || a.partial_dtype == DType::fp32, "partial_dtype",
          name(a.partial_dtype), "partial outputs are fp32, bf16 or fp16");
  require(is_16bit_float(a.out_dtype) || a.out_dtype == DType::fp32, "out_dtype",
          name(a.out_dtype), "outputs are bf16, fp16 or fp32");
  require(a.out_head_stride == 0 || a.out_head_stride >= a.heads, "out_head_stride",
          std::to_string(a.out_head_stride), "must be 0 or at least heads");
  require(a.out_stats_head_stride == 0 || a.out_stats_head_stride >= a.heads,
          "out_stats_head_stride", std::to_string(a.out_stats_head_stride),
          "must be 0 or at least heads");
  if (a.tokens == 0 || a.heads == 0) return;
  require(a.partial != nullptr, "partial", "null", "must point to [cp, tokens, heads, width]");
  require(a.stats != nullptr, "stats", "null", "must point to [cp, tokens, heads, 2]");
  require(a.out != nullptr, "out", "null", "must point to the output");
}

}  // namespace helixmla

#include "support/host_checks.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "compare.hpp"
#include "helixmla/reference.hpp"
#include "naive_attention.hpp"

namespace helixmla::testing {

BatchSpec small_mixed_spec(DType kv_dtype, std::uint64_t seed) {
  BatchSpec spec;
  spec.dims = {64, 16};
  spec.heads = 3;
  spec.contexts = 2;
  spec.context_len = 9;
  spec.generations = 3;
  spec.q_len = 2;
  spec.kv_len = {40, 7, 65};
  spec.page_size = 16;
  spec.use_kv_dtype(kv_dtype);
  spec.stats = true;
  spec.seed = seed;
  return spec;
}

Runtime host_only_runtime() {
  RuntimeOptions options;
  options.environment = Environment{};
  return Runtime(options);
}

void expect_matches_naive(SyntheticBatch& batch, const std::string& label) {
  const Problem p = batch.problem();
  const NaiveResult naive = naive_attention(p);
  const Comparison out = compare(p.out, p.out_dtype, naive.out);
  EXPECT_TRUE(out.within(output_tolerance(p.kv.dtype)))
      << label << ": rel L2 " << out.rel_l2_err << ", non-finite " << out.non_finite;
  if (p.stats.present()) {
    const StatsComparison stats = compare_stats(batch.stats_, naive.stats);
    EXPECT_TRUE(stats.within(1e-5)) << label << ": m " << stats.max_m_err << ", l " << stats.max_l_rel_err;
  }
}

bool outputs_untouched(SyntheticBatch& batch) {
  const Problem p = batch.problem();
  const std::int64_t outputs = p.num_tokens() * p.num_heads * p.dims.kv_lora_rank;
  for (std::int64_t i = 0; i < outputs; ++i) {
    if (!std::isnan(load_as_float(p.out, p.out_dtype, i))) return false;
  }
  for (float v : batch.stats_) {
    if (!std::isnan(v)) return false;
  }
  return true;
}

}  // namespace helixmla::testing

// Host twin of the Helix combine (DESIGN §5), float32 like the device kernel.
#include <cmath>
#include <limits>
#include <vector>

#include "core/partial_stats.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {

void helix_combine_host(const HelixCombineArgs& a) {
  check_helix_combine_args(a);
  const std::int64_t width = a.width;
  const std::int64_t out_stride = a.out_head_stride > 0 ? a.out_head_stride : a.heads;
  const std::int64_t stats_stride = a.out_stats_head_stride > 0 ? a.out_stats_head_stride : a.heads;
  const std::int64_t rank_rows = a.tokens * a.heads;  // (token, head) rows per source rank
  std::vector<float> weight(static_cast<std::size_t>(a.cp));
  std::vector<float> acc(static_cast<std::size_t>(width));

  for (std::int64_t t = 0; t < a.tokens; ++t) {
    for (std::int64_t h = 0; h < a.heads; ++h) {
      const std::int64_t row = t * a.heads + h;
      float max_m = -std::numeric_limits<float>::infinity();
      for (std::int32_t i = 0; i < a.cp; ++i) {
        const float* s = a.stats + 2 * (i * rank_rows + row);
        if (partial_role(s[0], s[1]) == PartialRole::merged) max_m = std::fmax(max_m, s[0]);
      }
      float denominator = 0.0f;
      for (std::int32_t i = 0; i < a.cp; ++i) {
        const float* s = a.stats + 2 * (i * rank_rows + row);
        const PartialRole role = partial_role(s[0], s[1]);
        weight[static_cast<std::size_t>(i)] = role == PartialRole::merged    ? s[1] * std::exp(s[0] - max_m)
                                              : role == PartialRole::skipped ? 0.0f
                                                                             : std::numeric_limits<float>::quiet_NaN();
        denominator += weight[static_cast<std::size_t>(i)];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      if (denominator != 0.0f) {
        for (std::int32_t i = 0; i < a.cp; ++i) {
          const float w = weight[static_cast<std::size_t>(i)] / denominator;
          if (w == 0.0f) continue;
          const std::int64_t base = (i * rank_rows + row) * width;
          for (std::int64_t k = 0; k < width; ++k) {
            acc[static_cast<std::size_t>(k)] += w * load_as_float(a.partial, a.partial_dtype, base + k);
          }
        }
      }
      const std::int64_t out_base = (t * out_stride + h) * width;
      for (std::int64_t k = 0; k < width; ++k) {
        store_from_float(a.out, a.out_dtype, out_base + k, acc[static_cast<std::size_t>(k)]);
      }
      if (a.out_stats != nullptr) {
        float* s = a.out_stats + 2 * (t * stats_stride + h);
        s[0] = denominator != 0.0f ? max_m : -std::numeric_limits<float>::infinity();
        s[1] = denominator;
      }
    }
  }
}

}  // namespace helixmla

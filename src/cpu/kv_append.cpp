// Host twin of the Helix KV append: the reference the device kernel is
// checked against, bit for bit.
#include <string>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {

void kv_append_host(const KvAppendArgs& args) {
  check_kv_append_args(args);
  const std::int64_t pool_rows = args.num_pages * args.page_size;
  const std::int64_t width = args.row_width;
  for (std::int64_t t = 0; t < args.tokens; ++t) {
    const std::int64_t row = args.destinations[t];
    if (row == -1) continue;
    if (row < 0 || row >= pool_rows) {
      throw InvalidArgument("destinations", t, std::to_string(row),
                            "must be -1 or a pool row below " + std::to_string(pool_rows));
    }
    for (std::int64_t k = 0; k < width; ++k) {
      const float value = load_as_float(args.new_rows, args.new_dtype, t * width + k);
      store_from_float(args.pool, args.kv_dtype, row * width + k, value / args.kv_scale);
    }
  }
}

}  // namespace helixmla

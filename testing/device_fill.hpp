// Random tensors generated on the device: benchmark batches are gigabytes,
// too large to draw on the host and copy over.
#pragma once

#if defined(HELIXMLA_WITH_CUDA)

#include <cstdint>

#include "helixmla/dtype.hpp"

namespace helixmla::testing {

// Fills `count` elements with uniform values in [-amplitude, amplitude)
// multiplied by `inverse_scale`, from a counter-based hash of (seed, index).
void fill_random_device(void* data, DType dtype, std::int64_t count, float amplitude, float inverse_scale,
                        std::uint64_t seed);

}  // namespace helixmla::testing

#endif

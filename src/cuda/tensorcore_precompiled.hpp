// Tensor-core kernels compiled into the library for sm_90a
// (src/cuda/sm90/tensorcore_precompiled.cu): the variants whose
// TensorcoreVariant::precompiled() is true.
#pragma once

#include "cuda/tensorcore_variants.hpp"

namespace helixmla::cuda {

// The kernel's host stub for cudaLaunchKernel, or nullptr when the variant
// is not compiled in.
const void* tensorcore_precompiled_kernel(const TensorcoreVariant& variant);

}  // namespace helixmla::cuda

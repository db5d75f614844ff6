#pragma once

#include "helixmla/backend.hpp"

namespace helixmla::cuda {

// Tensor-core kernel for the common shapes; page sizes outside its precompiled
// set are compiled just in time with NVRTC.
BackendPtr make_tensorcore_backend();

}  // namespace helixmla::cuda

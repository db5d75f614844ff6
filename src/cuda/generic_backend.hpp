#pragma once

#include "helixmla/backend.hpp"

namespace helixmla::cuda {

// SIMT kernel that runs every shape of the supported space, with split-KV.
BackendPtr make_generic_backend();

}  // namespace helixmla::cuda

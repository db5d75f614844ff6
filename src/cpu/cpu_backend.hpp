#pragma once

#include "helixmla/backend.hpp"

namespace helixmla::cpu {

// The float64 reference as a backend: every shape, host memory only.
BackendPtr make_cpu_backend();

}  // namespace helixmla::cpu

// The one place that knows every backend compiled into the library.
#include "cpu/cpu_backend.hpp"
#include "helixmla/runtime.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include "cuda/generic_backend.hpp"
#include "cuda/tensorcore_backend.hpp"
#endif

namespace helixmla {

std::vector<BackendPtr> builtin_backends() {
  std::vector<BackendPtr> backends{cpu::make_cpu_backend()};
#if defined(HELIXMLA_WITH_CUDA)
  backends.push_back(cuda::make_generic_backend());
  backends.push_back(cuda::make_tensorcore_backend());
#endif
  return backends;
}

}  // namespace helixmla

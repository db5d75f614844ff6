#include "core/env_integer.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "helixmla/error.hpp"

namespace helixmla {

long long parse_env_integer(const char* name, const char* text, long long lowest, long long most) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || value < lowest || value > most) {
    throw InvalidArgument(name, -1, text,
                          most == kEnvIntegerLimit
                              ? "must be an integer of at least " + std::to_string(lowest)
                              : "must be an integer from " + std::to_string(lowest) + " to " + std::to_string(most));
  }
  return value;
}

}  // namespace helixmla

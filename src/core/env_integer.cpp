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
  const bool integer = end != text && *end == '\0' && errno != ERANGE;
  if (!integer || value < lowest || value > most) {
    // A variable bounded only by the parser's limit names just its floor,
    // unless the value is past that limit.
    const bool floor_only = most == kEnvIntegerLimit && (!integer || value < lowest);
    throw InvalidArgument(name, -1, text,
                          floor_only ? "must be an integer of at least " + std::to_string(lowest)
                                     : "must be an integer from " + std::to_string(lowest) + " to " + std::to_string(most));
  }
  return value;
}

}  // namespace helixmla

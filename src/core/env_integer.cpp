#include "core/env_integer.hpp"

#include <charconv>
#include <string>
#include <string_view>

#include "helixmla/error.hpp"

namespace helixmla {

long long parse_env_integer(const char* name, const char* text, long long lowest, long long most) {
  // Read as the command line's integer flags are (tools/integer_flag.cpp):
  // decimal digits after an optional '-', with no '+' and no spaces.
  const std::string_view digits(text);
  long long value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  const bool read = !digits.empty() && end == digits.data() + digits.size();
  const bool overflow = error == std::errc::result_out_of_range;
  const std::string range = "an integer from " + std::to_string(lowest) + " to " + std::to_string(most);
  if (read && (overflow ? digits.front() != '-' : value > most)) {
    throw InvalidArgument(name, -1, text, "is too large; must be " + range);
  }
  if (!read || overflow || value < lowest) {
    // A variable bounded only by the parser's limit names just its floor.
    throw InvalidArgument(name, -1, text,
                          most == kEnvIntegerLimit ? "must be an integer of at least " + std::to_string(lowest)
                                                   : "must be " + range);
  }
  return value;
}

}  // namespace helixmla

// Integer settings read from environment variables (the device, exchange
// timeouts, the NCCL rank variables): one parser, so every variable is
// checked the same way and a bad value names the variable.
#pragma once

namespace helixmla {

// The bound of a variable with no upper bound of its own: far past any
// device index or timeout, and it keeps values within int.
inline constexpr long long kEnvIntegerLimit = 1LL << 30;

// `text` (the value of variable `name`) as a decimal integer in [lowest,
// most]; anything else (a '+', spaces or other characters around the
// digits, a value out of range) throws InvalidArgument naming the variable
// and the range.
long long parse_env_integer(const char* name, const char* text, long long lowest, long long most = kEnvIntegerLimit);

}  // namespace helixmla

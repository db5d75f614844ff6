// Integer flags read strictly. CLI::Range answers "--heads 8.5" with "Value
// 8.5 not in range 1 to 128", as if 8.5 were a number too large; these
// checks say whether the text is not an integer or is one out of range.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace helixmla::tools {

// `text` read as a decimal integer: its value when in [min, max], else
// `complaint` says why not ("is not an integer", "is outside [min, max]"),
// to follow the quoted text.
struct IntegerRead {
  std::int64_t value = 0;
  std::string complaint;
};
IntegerRead read_integer(const std::string& text, std::int64_t min, std::int64_t max);

// A validator for one integer option in [min, max]: "--heads: '8.5' is not an
// integer". Leading zeros are decimal ("010" is 10), as in the comma lists.
CLI::Validator integer_in(std::int64_t min, std::int64_t max);

// A validator for a text option whose empty value means "not given"
// (--backend, --profile, an output path): `--profile ""` from an unset shell
// variable would otherwise quietly do what the flag's absence does.
CLI::Validator non_empty();

}  // namespace helixmla::tools

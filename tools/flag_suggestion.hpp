// A hint for a misspelt flag. CLI11 answers "run --head 48" with "The
// following arguments were not expected: 48 --head"; the user is better
// served by the flag they probably meant.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace helixmla::tools {

// The long flag of `command` nearest to `unknown` ("--head" -> "--heads",
// "--kvlen" -> "--kv-len"), or empty when `command` has it or none is close.
std::string nearest_flag(const CLI::App& command, const std::string& unknown);

}  // namespace helixmla::tools

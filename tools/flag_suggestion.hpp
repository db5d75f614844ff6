// A hint for a misspelt flag. CLI11 answers "run --head 48" with "The
// following arguments were not expected: 48 --head"; the user is better
// served by the flag they probably meant.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace helixmla::tools {

// The long flags of `command` nearest to `unknown` ("--head" -> "--heads",
// "--kvlen" -> "--kv-len", "--kv" -> "--kv-len or --kv-dtype"), or empty
// when `command` has it, `unknown` is no long flag, or none is close.
std::string nearest_flags(const CLI::App& command, const std::string& unknown);

}  // namespace helixmla::tools

// Reading JSON documents that come from users (profiles, performance
// tables): a nesting limit, so a hostile or broken file ends in an error
// instead of exhausting the stack of the recursive parsers; no repeated keys,
// which JSON leaves to the reader and nlohmann settles by keeping the last in
// silence; and values quoted in error messages cut to a readable length.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace helixmla {

// Deeper than any document helixmla reads (the shipped profiles nest 9
// levels of arrays and objects).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; throws InvalidArgument naming `field` and `origin` (a path
// or "text") when it is not JSON or nests deeper than kMaxJsonDepth, or
// naming the path of the key ("profile.backends[0].name") when an object
// repeats a key.
nlohmann::json parse_json_input(std::string_view text, const std::string& field, const std::string& origin);

// Larger than any input file helixmla reads (the shipped performance table
// is 27 KB); a bound on what a wrong path can make it read.
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{64} << 20;

// Why the file at `path` may not be read as an input file ("is a
// directory", "is a FIFO (named pipe)", "is a socket"), or empty: told by its
// kind, before opening it, since opening a FIFO waits for a writer (for ever
// when none comes). Regular files and devices (bounded by
// kMaxInputFileBytes) may be read; a missing file is left to opening it.
std::string input_file_refusal(const std::string& path);

// The whole text of the file at `path` (any input file, JSON or not); one
// input_file_refusal refuses, an unreadable file or one past
// kMaxInputFileBytes throws InvalidArgument naming `field` and saying it is
// not a `what` file.
std::string read_input_file(const std::string& path, const std::string& field, const std::string& what);

// `value` as JSON text, at most about 80 characters ("..." marks the cut).
std::string brief_json(const nlohmann::json& value);

}  // namespace helixmla

// Files the commands write after long runs (bench's JSON and plot, tune's
// table, sweep's pictures): the path checked before the run, so a typo does
// not cost the measurements, and the write checked after it.
#pragma once

#include <string>

namespace helixmla::tools {

// Throws CLI::ValidationError naming `flag` when `path` is a directory, its
// directory does not exist, or either cannot be written.
void require_writable_file(const std::string& path, const std::string& flag);

// Creates the directory `path` where it does not exist; throws
// CLI::ValidationError naming `flag` when it is not a directory or a file
// cannot be created in it.
void require_writable_directory(const std::string& path, const std::string& flag);

// Writes `text` to `path`; throws RuntimeFailure naming `what` when any of it
// could not be written.
void write_text_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace helixmla::tools

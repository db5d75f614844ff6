#include "output_file.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "helixmla/error.hpp"

namespace helixmla::tools {

void require_writable_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path file(path);
  if (fs::is_directory(file, error)) throw CLI::ValidationError(flag, fmt::format("'{}' is a directory", path));
  const fs::path directory = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(directory, error)) {
    throw CLI::ValidationError(flag, fmt::format("'{}': the directory '{}' does not exist", path, directory.string()));
  }
  const bool writable = fs::exists(file, error) ? access(path.c_str(), W_OK) == 0
                                                 : access(directory.c_str(), W_OK | X_OK) == 0;
  if (!writable) throw CLI::ValidationError(flag, fmt::format("'{}' cannot be written", path));
}

void require_writable_directory(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (path.empty() || (fs::exists(path, error) && !fs::is_directory(path, error))) {
    throw CLI::ValidationError(flag, fmt::format("'{}' is not a directory", path));
  }
  fs::create_directories(path, error);
  if (error) throw CLI::ValidationError(flag, fmt::format("cannot create '{}': {}", path, error.message()));
  // A file made and removed: access() answers yes for root in folders such
  // as /proc, where no file can be made.
  std::string probe = (fs::path(path) / ".helixmla-write-check-XXXXXX").string();
  const int descriptor = mkstemp(probe.data());
  if (descriptor < 0) throw CLI::ValidationError(flag, fmt::format("'{}': no file can be created in it", path));
  close(descriptor);
  fs::remove(probe, error);
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream file(path);
  file << text;
  file.close();  // the last buffered write fails here, not at <<
  if (!file) throw RuntimeFailure("cannot write " + what + " " + path);
}

}  // namespace helixmla::tools

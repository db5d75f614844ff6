// Subcommands of the `helixmla` program; each file registers its own. A
// command that fails after printing its verdict throws CLI::RuntimeError(1);
// bad flag values throw CLI::ValidationError (exit 2).
#pragma once

#include <CLI/CLI.hpp>

#include <fstream>
#include <string>

namespace helixmla::tools {

// For input-file flags (--suite): a file that cannot be opened is refused
// while the flags are read, like any other bad value; what is wrong inside
// it (or that it is a directory) is the loader's to say.
inline std::string unreadable_file_complaint(const std::string& path) {
  return std::ifstream(path) ? std::string() : "'" + path + "' cannot be opened for reading";
}

void add_run_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_trace_command(CLI::App& app);

}  // namespace helixmla::tools

// Subcommands of the `helixmla` program; each file registers its own. A
// command that fails after printing its verdict throws CLI::RuntimeError(1);
// bad flag values throw CLI::ValidationError (exit 2).
#pragma once

#include <CLI/CLI.hpp>

#include <fstream>
#include <string>

#include "core/json_input.hpp"
#include "helixmla/environment.hpp"
#include "helixmla/error.hpp"

namespace helixmla::tools {

// For input-file flags (--suite): a file that cannot be read is refused
// while the flags are read, like any other bad value; what is wrong inside
// it is the loader's to say. Its kind is checked first, since opening a FIFO
// would wait for a writer.
inline std::string unreadable_file_complaint(const std::string& path) {
  if (const std::string refusal = input_file_refusal(path); !refusal.empty()) return "'" + path + "' " + refusal;
  return std::ifstream(path) ? std::string() : "'" + path + "' cannot be opened for reading";
}

// The commands that time or run kernels on this machine's GPU say so in one
// form when there is none (a failed run, exit 1, after their flags passed).
inline void require_cuda_gpu(const Environment& env, const std::string& command) {
  if (!env.has_gpu()) throw RuntimeFailure(command + " needs a CUDA GPU; none was found");
}

void add_run_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_trace_command(CLI::App& app);

}  // namespace helixmla::tools

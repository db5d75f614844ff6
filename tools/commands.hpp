// Subcommands of the `helixmla` program; each file registers its own. A
// command that fails after printing its verdict throws CLI::RuntimeError(1);
// bad flag values throw CLI::ValidationError (exit 2).
#pragma once

#include <CLI/CLI.hpp>

namespace helixmla::tools {

void add_run_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_trace_command(CLI::App& app);

}  // namespace helixmla::tools

// The `helixmla` command-line program.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flag_suggestion.hpp"
#include "helixmla/error.hpp"

namespace {
constexpr const char* kHelpHint = "Run 'helixmla --help' or 'helixmla <command> --help'.\n";

// What a command printed is its result: one lost to a full disk or a closed
// pipe is a failed command, not a success with nothing to show. C's stdout
// is flushed too: `trace` prints through it.
int with_output_written(int code) {
  std::cout.flush();
  const bool written = std::cout && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (code != 0 || written) return code;
  std::cerr << "helixmla: the output could not be written to standard output\n";
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"helixmla: decode-time Multi-head Latent Attention over a paged KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("helixmla ") + HELIXMLA_VERSION);
  helixmla::tools::add_run_command(app);
  helixmla::tools::add_explain_command(app);
  helixmla::tools::add_sweep_command(app);
  helixmla::tools::add_bench_command(app);
  helixmla::tools::add_tune_command(app);
  helixmla::tools::add_trace_command(app);
  // CLI11 answers a misspelt command, and an unknown flag given with no
  // command, with "A subcommand is required": both are named here.
  const std::vector<CLI::App*> commands = app.get_subcommands([](CLI::App*) { return true; });
  const auto is_command = [&commands](const std::string& arg) {
    return std::any_of(commands.begin(), commands.end(), [&](const CLI::App* c) { return c->get_name() == arg; });
  };
  for (int i = 1; i < argc && !is_command(argv[i]); ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] != '-') {
      std::string known;
      for (const CLI::App* command : commands) known += (known.empty() ? "" : ", ") + command->get_name();
      std::cerr << "helixmla: unknown command '" << arg << "'; the commands are " << known
                << "\nRun 'helixmla --help'.\n";
      return 2;
    }
    const std::string flag = arg.substr(0, arg.find('='));
    if (app.get_option_no_throw(flag) != nullptr) continue;
    std::string owners;
    for (const CLI::App* command : commands) {
      if (command->get_option_no_throw(flag) != nullptr) owners += (owners.empty() ? "" : ", ") + command->get_name();
    }
    std::cerr << "helixmla: " << flag << " is not an option of the program"
              << (owners.empty() ? "" : "; it is an option of " + owners + ": give it after the command's name") << "\n"
              << kHelpHint;
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return with_output_written(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return with_output_written(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return with_output_written(app.exit(e));
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command finished with a verdict it already printed
  } catch (const CLI::ExtrasError& e) {
    std::cerr << "helixmla: " << e.what() << "\n";
    // The command's own flags follow its name; what comes before belongs to the program.
    const CLI::App* command = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
    char** const end = argv + argc;
    char** const name = command == &app ? argv : std::find(argv + 1, end, command->get_name());
    for (char** arg = std::min(name + 1, end); arg != end; ++arg) {
      if (const std::string flags = helixmla::tools::nearest_flags(*command, *arg); !flags.empty()) {
        std::cerr << "helixmla: " << *arg << ": did you mean " << flags << "?\n";
      }
    }
    std::cerr << kHelpHint;
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << "helixmla: " << e.what() << "\n" << kHelpHint;
    return 2;
  } catch (const helixmla::InvalidArgument& e) {
    std::cerr << "helixmla: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "helixmla: out of host memory (std::bad_alloc); try a smaller --batch, --kv-len, --q-len or --contexts\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "helixmla: " << e.what() << "\n";
    return 1;
  }
  return with_output_written(0);
}

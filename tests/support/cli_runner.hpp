// Runs the `helixmla` program this build produced, for the tests of its
// verdicts and messages: exit status, stdout and stderr apart.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace helixmla::testing {

struct CliOutcome {
  int code = -1;  // the exit status; -1 when the program did not exit
  std::string out;
  std::string err;
  std::string both() const { return out + err; }
};

inline const std::string& cli_path() {
  static const std::string path = std::string(HELIXMLA_BINARY_DIR) + "/helixmla";
  return path;
}

// `helixmla args`, with `environment` ("NAME=VALUE ...", or empty) added to
// the program's environment.
inline CliOutcome run_cli(const std::string& args, const std::string& environment = "") {
  static int calls = 0;
  const std::filesystem::path err_path =
      std::filesystem::temp_directory_path() /
      ("helixmla-cli-" + std::to_string(getpid()) + "-" + std::to_string(++calls) + ".err");
  const std::string command = (environment.empty() ? "" : "env " + environment + " ") + cli_path() + " " + args +
                              " 2>" + err_path.string();
  CliOutcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return outcome;
  std::array<char, 1 << 16> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) outcome.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  outcome.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return outcome;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace helixmla::testing

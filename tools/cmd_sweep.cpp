// `helixmla sweep`: run the whole supported space through the selector, for
// the built-in backends or a profile, and report who wins where and every
// shape nothing can run. Pictures of heads x page size go to --out.
//
// Extension point: a mode that also executes each point on a GPU passes a
// SweepHooks::visit callback to sweep(); it receives every point (phase shape,
// environment, decision) in order.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "comma_list.hpp"
#include "commands.hpp"
#include "core/sweep.hpp"
#include "decision_json.hpp"
#include "helixmla/profile.hpp"
#include "helixmla/runtime.hpp"
#include "integer_flag.hpp"
#include "output_file.hpp"
#include "sweep_execute.hpp"

namespace helixmla::tools {

namespace {

struct SweepFlags {
  std::string profile;
  std::vector<std::string> archs;
  std::string out = "sweep-out";
  bool json = false;
  bool list_all = false;
  bool execute = false;
  double max_seconds = 540.0;
};

std::string space_summary(const SweepSpace& s) {
  std::string helix = s.helix.size() == 2 ? "Helix off and on" : (s.helix.front() ? "Helix on" : "Helix off");
  std::string pages;
  for (std::int32_t p : s.page_sizes) pages += (pages.empty() ? "" : ",") + std::to_string(p);
  std::string dtypes;
  for (DType d : s.kv_dtypes) dtypes += (dtypes.empty() ? "" : ",") + std::string(to_string(d));
  if (std::find(s.kv_dtypes.begin(), s.kv_dtypes.end(), DType::fp8_e4m3) != s.kv_dtypes.end()) {
    std::string q;
    for (DType d : s.fp8_q_dtypes) q += (q.empty() ? "" : ",") + std::string(to_string(d));
    dtypes += " (fp8 with Q " + q + ")";
  }
  const bool contexts = std::find(s.phases.begin(), s.phases.end(), PhaseKind::context) != s.phases.end();
  // Without context phases a mixed batch adds nothing: its generation part has the plain batch's shape.
  const char* batches = !contexts ? "generation phases" : (s.mixed_batches ? "plain and mixed batches" : "plain batches");
  return fmt::format("heads {}..{}, q_len {}..{}, pages {}, KV {}, {}, {}", s.heads.front(), s.heads.back(),
                     s.q_lens.front(), s.q_lens.back(), pages, dtypes, helix, batches);
}

// A profile can leave tens of thousands of shapes unroutable: the first few
// show the pattern without burying the summary; the rest are counted.
constexpr std::size_t kIssuesListed = 20;

void print_issues(std::ostream& out, const std::vector<SweepIssue>& issues, bool all) {
  const std::size_t listed = all ? issues.size() : std::min(issues.size(), kIssuesListed);
  for (std::size_t i = 0; i < listed; ++i) {
    out << "  " << to_string(issues[i].arch) << " " << describe(issues[i].shape) << "\n";
    for (const Candidate& c : issues[i].candidates) out << "      " << c.backend << ": " << c.reason << "\n";
  }
  if (listed < issues.size()) {
    out << fmt::format("  ... and {} more (--list-all prints them all; --json lists them all as JSON)\n",
                       issues.size() - listed);
  }
}

nlohmann::json issues_json(const std::vector<SweepIssue>& issues) {
  nlohmann::json out = nlohmann::json::array();
  for (const SweepIssue& issue : issues) {
    out.push_back({{"arch", std::string(to_string(issue.arch))},
                   {"shape", describe(issue.shape)},
                   {"candidates", candidates_json(issue.candidates)}});
  }
  return out;
}

void run_sweep(const SweepFlags& flags) {
  SweepSpace space;
  std::vector<BackendPtr> backends;
  std::string source = "built-in backends";
  std::string file_prefix = "builtin";
  if (!flags.profile.empty()) {
    Profile profile = load_profile(flags.profile);
    source = fmt::format("profile {} ({})", profile.name, profile.origin);
    file_prefix = profile.name;
    space.archs = profile.archs;
    space.phases = profile.phases;
    space.device_tensors = true;  // a profile describes GPU libraries
    backends = std::move(profile.backends);
  } else {
    backends = builtin_backends();
#if defined(HELIXMLA_WITH_CUDA)
    space.device_tensors = true;  // with CUDA backends built, GPU machines hold tensors on the device
#endif
  }
  if (!flags.archs.empty()) {
    space.archs.clear();
    for (const std::string& name : flags.archs) space.archs.push_back(*parse_arch(name));
  }
  if (flags.execute) {
    if (!flags.profile.empty()) {
      throw CLI::ValidationError("--execute", "profile backends are descriptions and cannot be executed");
    }
    if (const int code = execute_sweep(backends, space, flags.max_seconds, flags.json); code != 0) {
      throw CLI::RuntimeError(code);
    }
    return;
  }

  // The pictures' folder is checked before the sweep, not after minutes of it.
  require_writable_directory(flags.out, "--out");
  std::cerr << fmt::format("sweep: {} over {} architecture(s): {}\n", source, space.archs.size(),
                           space_summary(space));
  // A sweep of a second or two needs no progress; a longer one reports every
  // two seconds and, having started to, ends at 100%.
  using Clock = std::chrono::steady_clock;
  constexpr auto kProgressEvery = std::chrono::seconds(2);
  Clock::time_point next_report = Clock::now() + kProgressEvery;
  int last_reported = -1;
  SweepHooks hooks;
  hooks.progress = [&](Arch arch, double done) {
    const Clock::time_point now = Clock::now();
    if (now < next_report) return;
    next_report = now + kProgressEvery;
    last_reported = static_cast<int>(done * 100.0);
    std::cerr << fmt::format("sweep: {:>3}% ({})\n", last_reported, to_string(arch));
  };
  const SweepResult result = sweep(backends, space, hooks);
  if (last_reported >= 0 && last_reported < 100) {
    std::cerr << fmt::format("sweep: 100% ({})\n", to_string(result.archs.back().arch));
  }

  std::vector<std::string> pictures;
  for (const SweepArch& arch : result.archs) {
    const std::string path = (std::filesystem::path(flags.out) /
                              fmt::format("{}-{}.svg", file_prefix, to_string(arch.arch))).string();
    write_text_file(path, sweep_svg(result, arch), "the sweep picture");
    pictures.push_back(path);
  }

  if (flags.json) {
    nlohmann::json out;
    out["backends_source"] = source;
    out["space"] = space_summary(space);
    out["backends"] = result.backends;
    out["archs"] = nlohmann::json::array();
    for (const SweepArch& a : result.archs) {
      out["archs"].push_back({{"arch", std::string(to_string(a.arch))},
                              {"points", a.points},
                              {"unroutable_points", a.unroutable_points},
                              {"wins", a.wins}});
    }
    out["points"] = result.points();
    out["unroutable"] = issues_json(result.unroutable);
    out["fails_at_run"] = issues_json(result.fails_at_run);
    out["pictures"] = pictures;
    std::cout << out.dump(2) << "\n";
  } else {
    std::ostringstream text;
    text << fmt::format("sweep of {}: {} selections ({})\n\n", source, result.points(), space_summary(space));
    text << fmt::format("{:<7} {:>9}", "arch", "points");
    for (const std::string& b : result.backends) text << fmt::format(" {:>{}}", b, std::max<std::size_t>(b.size(), 8));
    text << fmt::format(" {:>10}\n", "unroutable");
    for (const SweepArch& a : result.archs) {
      text << fmt::format("{:<7} {:>9}", to_string(a.arch), a.points);
      for (const std::string& b : result.backends) {
        const auto it = a.wins.find(b);
        text << fmt::format(" {:>{}}", it == a.wins.end() ? 0 : it->second, std::max<std::size_t>(b.size(), 8));
      }
      text << fmt::format(" {:>10}\n", a.unroutable_points);
    }
    text << fmt::format("\nshapes no backend can run: {}\n", result.unroutable.size());
    print_issues(text, result.unroutable, flags.list_all);
    if (!result.fails_at_run.empty()) {
      text << fmt::format("\nshapes whose chosen backend fails at run time: {}\n", result.fails_at_run.size());
      print_issues(text, result.fails_at_run, flags.list_all);
    }
    text << "\npictures:";
    for (const std::string& p : pictures) text << " " << p;
    text << "\n";
    std::cout << text.str();
  }
  if (!result.unroutable.empty() || !result.fails_at_run.empty()) throw CLI::RuntimeError(1);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto flags = std::make_shared<SweepFlags>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Run every shape of the supported space (" + space_summary(SweepSpace()) +
          ") through the selector on each architecture. Prints the selections each backend wins and the shapes "
          "no backend can run (the first " + std::to_string(kIssuesListed) +
          " unless --list-all), and any whose chosen profile backend looks its kernel up only at run time and finds "
          "none; exit 0 when there is neither, 1 otherwise, 2 for bad flags.");
  cmd->add_option("--profile", flags->profile,
                  "Sweep a profile's described backends (a name such as trtllm, or a .json path); its scope sets "
                  "the default architectures and phases")
      ->check(non_empty());
  CLI::Option* arch = add_name_list(
      *cmd, "--arch", flags->archs,
      [](const std::string& value) { return parse_arch(value) ? std::string() : "unknown architecture"; },
      [](const std::string& value) { return std::string(to_string(*parse_arch(value))); },
      "Architectures to sweep, comma-separated; default: all (or the profile's); not with --execute, which runs "
      "this GPU's");
  CLI::Option* out =
      cmd->add_option("--out", flags->out, "Directory for one SVG per architecture (not with --execute, which draws none)")
          ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print the result as JSON (every unroutable shape included)");
  CLI::Option* list_all =
      cmd->add_flag("--list-all", flags->list_all,
                    "List every shape no backend can run, not only the first " + std::to_string(kIssuesListed) +
                        "; not with --execute, which lists every combination it runs");
  CLI::Option* execute = cmd->add_flag(
      "--execute", flags->execute,
      "On this GPU, run one cell of every combination the CUDA backends claim (backend, kernel, page-size class, KV "
      "dtype, q_len class, phase, Helix) and compare it with the float64 reference");
  // What --execute would ignore is refused with it, not dropped.
  execute->excludes(out)->excludes(arch)->excludes(list_all);
  cmd->add_option("--max-seconds", flags->max_seconds, "Time budget of --execute: every (backend, kernel, page class, dtypes, q_len class) once first, then "
                  "the Helix and mixed forms; precompiled kernels before JIT-compiled ones in each, which compile on other "
                  "threads meanwhile")
      ->capture_default_str()
      ->check([](const std::string& value) {
        char* end = nullptr;
        const double seconds = std::strtod(value.c_str(), &end);
        return end != value.c_str() && *end == '\0' && seconds > 0.0 && seconds <= 86400.0
                   ? std::string()
                   : "'" + value + "' is not a number of seconds above 0 and at most 86400";
      })
      ->needs(execute);
  cmd->callback([flags] { run_sweep(*flags); });
}

}  // namespace helixmla::tools

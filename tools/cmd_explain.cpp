// `helixmla explain`: every backend's verdict on each phase of a batch and the
// choice the selector makes, for this machine or one named by --arch, with
// the built-in backends or a profile's.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/candidates.hpp"
#include "decision_json.hpp"
#include "helixmla/error.hpp"
#include "helixmla/profile.hpp"
#include "helixmla/runtime.hpp"
#include "integer_flag.hpp"
#include "problem_flags.hpp"

namespace helixmla::tools {

namespace {

struct ExplainFlags {
  ProblemFlags problem;
  std::string arch;
  int cp = 1;
  std::string profile;
  std::string perf_table;
  bool json = false;
};

struct PhaseVerdict {
  Decision decision;   // choice empty when no backend can run the phase
  std::string error;   // why not, when no choice was made
  bool fails_at_run = false;
  bool outside_scope = false;  // a phase the profile does not describe
};

std::string phase_name(PhaseKind kind) { return kind == PhaseKind::context ? "context" : "generation"; }

// This machine, or the one --arch names. Without --arch, a profile that does
// not cover this machine (a laptop with no GPU, say) would only report every
// backend unavailable, so its first architecture is explained instead, said
// on stderr to keep --json parseable.
Environment explained_machine(const std::string& arch_flag, const std::optional<Profile>& profile) {
  Environment env = Environment::detect();
  Arch arch = env.arch;
  if (!arch_flag.empty()) {
    arch = *parse_arch(arch_flag);
  } else if (profile && std::find(profile->archs.begin(), profile->archs.end(), env.arch) == profile->archs.end()) {
    arch = profile->archs.front();
    const std::string machine =
        env.has_gpu() ? fmt::format("is {}, which it does not cover", to_string(env.arch)) : "has no GPU";
    std::cerr << fmt::format("explain: assuming {} for profile {} (it covers {}): this machine {}; pass --arch to "
                             "choose\n",
                             to_string(arch), profile->name, to_string(profile->archs), machine);
  }
  if (arch != env.arch) {
    // A machine described, not this one: same build, GPU present, NVRTC installed.
    env.arch = arch;
    env.device_count = arch == Arch::none ? 0 : 1;
    env.nvrtc = arch != Arch::none;
  }
  return env;
}

PhaseVerdict explain_phase(const Selector& selector, const PhaseShape& shape, const std::string& forced) {
  PhaseVerdict verdict;
  try {
    verdict.decision = selector.select(shape, forced);
    for (const Candidate& c : verdict.decision.candidates) {
      if (c.backend == verdict.decision.choice) verdict.fails_at_run = fails_at_run(c);
    }
  } catch (const NoCapableBackend& e) {
    verdict.decision.shape = shape;
    verdict.decision.candidates = assess_all(selector.backends(), shape, selector.environment());
    verdict.error = e.what();
  }
  return verdict;
}

nlohmann::json phase_json(const PhaseVerdict& v) {
  const Decision& d = v.decision;
  nlohmann::json out = {{"phase", phase_name(d.shape.phase)}, {"shape", describe(d.shape)}};
  out["choice"] = d.choice.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.choice);
  out["rule"] = d.rule.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.rule);
  std::string kernel;
  for (const Candidate& c : d.candidates) {
    if (c.backend == d.choice) kernel = c.kernel;
  }
  out["kernel"] = kernel.empty() ? nlohmann::json(nullptr) : nlohmann::json(kernel);
  out["fails_at_run"] = v.fails_at_run;
  out["error"] = v.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.error);
  out["outside_scope"] = v.outside_scope;
  out["candidates"] = candidates_json(d.candidates);
  return out;
}

void explain(const ExplainFlags& flags) {
  std::optional<Profile> profile;
  if (!flags.profile.empty()) profile = load_profile(flags.profile);
  const Environment env = explained_machine(flags.arch, profile);
  std::vector<BackendPtr> backends;
  std::string source = "built-in backends";
  std::vector<PhaseKind> scope = {PhaseKind::context, PhaseKind::generation};
  if (profile) {
    scope = profile->phases;
    source = fmt::format("profile {} ({})", profile->name, profile->origin);
    require_known_backend(flags.problem.backend, profile->backends, "profile " + profile->name);
    backends = std::move(profile->backends);
  } else {
    backends = builtin_backends();
    require_known_backend(flags.problem.backend, backends, "this build");
  }
  // As the library chooses: a profile replays another system's choices, by
  // its own rules and without this build's table.
  PerfTable table;
  if (!flags.perf_table.empty()) {
    table = PerfTable::load(flags.perf_table, "--perf-table");
  } else if (flags.profile.empty()) {
    table = load_perf_table(RuntimeOptions{}, env);
  }
  const Selector selector(std::move(backends), env, std::move(table));

  std::vector<PhaseVerdict> verdicts;
  for (const PhaseShape& shape : phase_shapes(flags.problem, env, flags.cp)) {
    if (std::find(scope.begin(), scope.end(), shape.phase) == scope.end()) {
      // The profile says nothing about this phase (as `sweep --profile`
      // skips it), so no backend choosing it is not a failure.
      PhaseVerdict outside;
      outside.decision.shape = shape;
      outside.outside_scope = true;
      verdicts.push_back(std::move(outside));
      continue;
    }
    verdicts.push_back(explain_phase(selector, shape, flags.problem.backend));
  }
  bool failed = false;
  for (const PhaseVerdict& v : verdicts) failed = failed || !v.error.empty() || v.fails_at_run;

  if (flags.json) {
    // The top level is the generation phase when there is one (the last),
    // so single-phase batches read as one flat object; "phases" has them all.
    nlohmann::json out = phase_json(verdicts.back());
    out["arch"] = std::string(to_string(env.arch));
    out["backends"] = source;
    out["phases"] = nlohmann::json::array();
    for (const PhaseVerdict& v : verdicts) out["phases"].push_back(phase_json(v));
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{} on {} (NVRTC {})\n", source, to_string(env.arch), env.nvrtc ? "yes" : "no");
    for (const PhaseVerdict& v : verdicts) {
      std::cout << "\nphase " << phase_name(v.decision.shape.phase) << "\n";
      if (v.outside_scope) {
        std::cout << "shape: " << describe(v.decision.shape) << "\noutside the profile's scope: not explained\n";
        continue;
      }
      std::cout << v.decision.trace();
      if (!v.error.empty()) std::cout << "error: " << v.error << "\n";
      if (v.fails_at_run) {
        std::cout << fmt::format(
            "warning: {} is chosen by this system's routing but its kernel lookup fails when the call runs\n",
            v.decision.choice);
      }
    }
  }
  if (failed) throw CLI::RuntimeError(1);
}

}  // namespace

void add_explain_command(CLI::App& app) {
  auto flags = std::make_shared<ExplainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Show every backend's verdict on each phase of a batch and the selector's choice. Exit 0 when every "
      "phase has a backend, 1 when one has none (or the chosen profile backend fails at run time), 2 for bad flags. "
      "With --profile, phases outside the profile's scope are shown as such and do not fail.");
  add_problem_flags(*cmd, flags->problem);
  cmd->add_option("--arch", flags->arch,
                  "GPU architecture to explain for (none, sm80, sm86, sm89, sm90, sm100, sm103, sm120); default: this "
                  "machine's, or with --profile the profile's first architecture when it does not cover this "
                  "machine. Another architecture describes a machine with this build's backends and NVRTC")
      ->check([](const std::string& value) {
        return parse_arch(value) ? std::string() : "unknown architecture " + value;
      });
  cmd->add_option("--cp", flags->cp, "Helix context-parallel size; > 1 turns Helix on (with float32 stats)")
      ->capture_default_str()
      ->transform(integer_in(1, 1024));
  cmd->add_option("--profile", flags->profile,
                  "Explain with a profile's described backends (a name such as trtllm, or a .json path) instead "
                  "of the built-in ones; its scope sets the phases explained, and the architecture when it does "
                  "not cover this machine's")
      ->check(non_empty());
  cmd->add_option("--perf-table", flags->perf_table,
                  "Measured performance table (JSON) to choose among capable backends; default "
                  "$HELIXMLA_PERF_TABLE for built-in backends")
      ->check(non_empty());
  cmd->add_flag("--json", flags->json,
                "Print JSON: phase, shape, choice, rule, kernel, fails_at_run, error, outside_scope, candidates[] (backend, "
                "available, capable, reason, kernel, fails_at_run, measured_us); the top level is the generation phase "
                "(else the context phase), with arch, backends and \"phases\", which lists every phase");
  cmd->callback([flags, cmd] {
    refuse_lengths_without_requests(*cmd, flags->problem);
    if (flags->cp > 1 && flags->problem.stats) {
      throw CLI::ValidationError("--stats", "a Helix rank (--cp > 1) always produces the float32 statistics its "
                                            "combine needs; --stats would change nothing");
    }
    explain(*flags);
  });
}

}  // namespace helixmla::tools

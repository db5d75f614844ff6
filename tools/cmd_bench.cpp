// `helixmla bench --suite FILE`: each case's median time, bandwidth and
// arithmetic rate against the copy bandwidth and bf16 matrix rate measured in
// the same run (DESIGN §7), each case checked against the float64 reference.
// Rates come from queued iterations (the device time per call when calls
// follow each other, as in an engine's step); the isolated median beside it
// also holds the host's launch latency.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "bench_suite.hpp"
#include "comma_list.hpp"
#include "commands.hpp"
#include "helixmla/error.hpp"
#include "helixmla/runtime.hpp"
#include "integer_flag.hpp"
#include "output_file.hpp"
#include "problem_flags.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include "bench_case_runner.hpp"
#include "gpu_measure.hpp"
#endif

namespace helixmla::tools {

namespace {

struct BenchFlags {
  std::string suite = std::string(HELIXMLA_SOURCE_DIR) + "/bench/mla-decode-v1.csv";
  std::vector<int> cases;
  std::string backend;
  int iterations = 50;
  bool graphs = true;
  bool verify = true;
  bool gather = false;
  bool host = false;
  std::string json_path;
  std::string plot_path;
};

// Bars of each case's share of the copy bandwidth and of the matrix rate.
std::string plot_svg(const nlohmann::json& rows) {
  const int bar = 18, gap = 10, left = 60, height = 320;
  const int width = left + static_cast<int>(rows.size()) * (2 * bar + gap) + 20;
  std::string svg;
  svg += fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='11'>\n",
                     width, height + 60);
  svg += fmt::format("<text x='{}' y='14'>helixmla bench: % of copy bandwidth (blue) and of bf16 matrix rate (orange)</text>\n", left);
  for (int pct = 0; pct <= 100; pct += 25) {
    const int y = 30 + height - pct * height / 100;
    svg += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='#ddd'/><text x='20' y='{}'>{}%</text>\n", left,
                       width - 10, y, y, y + 4, pct);
  }
  int x = left + 5;
  for (const auto& row : rows) {
    const double bw = std::min(100.0, row["pct_copy"].get<double>());
    const double mm = std::min(100.0, row["pct_matrix"].get<double>());
    const int hb = static_cast<int>(bw * height / 100), hm = static_cast<int>(mm * height / 100);
    svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='#3b75af'/>\n", x, 30 + height - hb, bar, hb);
    svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='#ef8636'/>\n", x + bar, 30 + height - hm, bar, hm);
    svg += fmt::format("<text x='{}' y='{}'>{}</text>\n", x + bar - 4, height + 48, row["case"].get<int>());
    x += 2 * bar + gap;
  }
  svg += "</svg>\n";
  return svg;
}

// The suite's cases that --cases names (all when it names none); an id the
// suite lacks is a bad flag value rather than a case silently not run.
std::vector<BenchCase> selected_cases(const BenchFlags& flags) {
  std::vector<BenchCase> cases = load_suite(flags.suite);
  if (flags.cases.empty()) return cases;
  for (int id : flags.cases) {
    if (std::none_of(cases.begin(), cases.end(), [&](const BenchCase& c) { return c.id == id; })) {
      throw CLI::ValidationError("--cases", fmt::format("case {} is not in the suite {}", id, flags.suite));
    }
  }
  std::erase_if(cases, [&](const BenchCase& c) {
    return std::find(flags.cases.begin(), flags.cases.end(), c.id) == flags.cases.end();
  });
  return cases;
}

int run_bench(const BenchFlags& flags) {
  // Bad flags are reported as such on any machine, before the GPU is looked for.
  const std::vector<BenchCase> cases = selected_cases(flags);
  require_known_backend(flags.backend, builtin_backends(), "this build");
  if (!flags.json_path.empty()) require_writable_file(flags.json_path, "--json");
  if (!flags.plot_path.empty()) require_writable_file(flags.plot_path, "--plot");
#if defined(HELIXMLA_WITH_CUDA)
  require_cuda_gpu(Environment::detect(), "bench");
  CaseRunner runner(flags.backend);
  std::cerr << "measuring the device's copy bandwidth and bf16 matrix rate...\n";
  const Ceilings ceilings = measure_ceilings(runner.stream());
  std::cout << fmt::format("device: {}  copy {:.0f} GB/s  bf16 matrix {:.0f} TFLOP/s\n", runner.device_name(),
                           ceilings.copy_gbs, ceilings.bf16_tflops);
  std::cout << fmt::format("{:>4} {:>5} {:>3} {:>5} {:>7} {:>5} {:>5} {:<30} {:>9} {:>9} {:>8} {:>8} {:>6} {:>6} {:>9} {}\n", "case",
                           "heads", "q", "batch", "kv", "page", "kv", "backend", "us", "isolated", "GB/s", "TFLOP/s", "%copy",
                           "%mma", "rel_l2", "ok");
  nlohmann::json rows = nlohmann::json::array();
  bool all_ok = true;
  for (const BenchCase& c : cases) {
    std::cerr << fmt::format("case {} ({})...\n", c.id, c.note);
    CaseOptions options;
    options.iterations = flags.iterations;
    options.graphs = flags.graphs;
    options.verify = flags.verify;
    options.gather = flags.gather;
    options.host = flags.host;
    const CaseResult r = runner.run(c, options);
    const CaseCost cost = cost_of(c);
    const double us = r.timing.queued_median_us;
    const double gbs = cost.bytes / (us * 1e3);
    const double tflops = cost.flops / (us * 1e6);
    const bool ok = !flags.verify || r.correct;
    all_ok = all_ok && ok;
    const std::string kv = c.kv_len.size() > 1 && c.kv_len[0] != c.kv_len[1] ? "var" : std::to_string(c.kv_len[0]);
    std::cout << fmt::format("{:>4} {:>5} {:>3} {:>5} {:>7} {:>5} {:>5} {:<30} {:>9.1f} {:>9.1f} {:>8.0f} {:>8.1f} {:>6.1f} {:>6.1f} {:>9.2e} {}\n",
                             c.id, c.heads, c.q_len, c.batch, kv, c.page_size, to_string(c.kv_dtype), r.backend,
                             us, r.timing.isolated_median_us, gbs, tflops, 100.0 * gbs / ceilings.copy_gbs,
                             100.0 * tflops / ceilings.bf16_tflops, r.rel_l2_err, ok ? "yes" : "NO");
    rows.push_back({{"case", c.id}, {"backend", r.backend}, {"median_us", us},
                    {"isolated_median_us", r.timing.isolated_median_us}, {"isolated_min_us", r.timing.isolated_min_us},
                    {"isolated_max_us", r.timing.isolated_max_us}, {"gb_per_s", gbs},
                    {"tflop_per_s", tflops}, {"pct_copy", 100.0 * gbs / ceilings.copy_gbs},
                    {"pct_matrix", 100.0 * tflops / ceilings.bf16_tflops}, {"rel_l2_err", r.rel_l2_err},
                    {"correct", ok}});
    if (flags.gather) {
      // The same KV rows read through the same page tables with no math:
      // how much of the gap to the copy bandwidth the access pattern costs.
      const double gather_gbs = cost.kv_bytes / (r.gather_us * 1e3);
      std::cout << fmt::format("{:>4} gather ceiling {:.1f} us, {:.0f} GB/s ({:.1f}% of copy); the case takes {:.2f}x it\n",
                               "", r.gather_us, gather_gbs, 100.0 * gather_gbs / ceilings.copy_gbs,
                               us / r.gather_us);
      rows.back()["gather_us"] = r.gather_us;
      rows.back()["gather_gb_per_s"] = gather_gbs;
    }
    if (flags.host) {
      std::cout << fmt::format(
          "{:>4} host per call: prepare {:.1f} us; enqueue of a layer on a prepared run {:.1f} us alone, {:.1f} us "
          "each in a step of 61\n",
          "", r.host.prepare_us, r.host.layer_enqueue_us, r.host.step_layer_us);
      rows.back()["host_prepare_us"] = r.host.prepare_us;
      rows.back()["host_layer_enqueue_us"] = r.host.layer_enqueue_us;
      rows.back()["host_step_layer_us"] = r.host.step_layer_us;
    }
  }
  const nlohmann::json report = {{"device", runner.device_name()},
                                 {"copy_gb_per_s", ceilings.copy_gbs},
                                 {"bf16_tflop_per_s", ceilings.bf16_tflops},
                                 {"graphs", flags.graphs},
                                 {"iterations", flags.iterations},
                                 {"cases", rows}};
  if (!flags.json_path.empty()) write_text_file(flags.json_path, report.dump(2) + "\n", "the results as JSON to");
  if (!flags.plot_path.empty()) write_text_file(flags.plot_path, plot_svg(rows), "the plot to");
  return all_ok ? 0 : 1;
#else
  (void)cases;
  std::cerr << "helixmla bench: this build has no CUDA backends; the suite is sized for a GPU\n";
  return 1;
#endif
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time a benchmark suite on this machine's CUDA GPU (one is needed; DESIGN §7) and check every case");
  cmd->add_option("--suite", flags->suite, "Suite CSV (case,heads,q_len,batch,kv_len,page_size,kv_dtype,note)")
      ->capture_default_str()
      ->check(unreadable_file_complaint);
  add_int_list(*cmd, "--cases", flags->cases, 1, kMaxSuiteInteger, "Only these case ids, e.g. 1,4,8");
  cmd->add_option("--backend", flags->backend, "Force a backend instead of the selector's choice")->check(non_empty());
  cmd->add_option("--iterations", flags->iterations, "Timed iterations per case (median reported)")
      ->capture_default_str()->transform(integer_in(1, 100000));
  // Callbacks rather than CLI11's "!" negation, which the help would show as "--no-graphs{false}".
  cmd->add_flag_callback("--no-graphs", [flags] { flags->graphs = false; },
                         "Launch directly instead of replaying CUDA graphs");
  cmd->add_flag_callback("--no-verify", [flags] { flags->verify = false; },
                         "Skip the check against the float64 reference");
  cmd->add_flag("--gather", flags->gather,
                "Also time a plain read of each case's KV rows through its page tables (the gather ceiling)");
  cmd->add_flag("--host", flags->host,
                "Also time the host per call: Runtime::prepare of each case's batch, and enqueue of one more "
                "layer on a prepared run");
  cmd->add_option("--json", flags->json_path, "Also write the results as JSON to this file")->check(non_empty());
  cmd->add_option("--plot", flags->plot_path, "Also write an SVG bar chart to this file")->check(non_empty());
  cmd->callback([flags] {
    if (const int code = run_bench(*flags); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace helixmla::tools

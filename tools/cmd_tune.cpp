// `helixmla tune`: measures every capable backend over the suite and a grid
// of shapes and writes the performance table the selector loads.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_suite.hpp"
#include "comma_list.hpp"
#include "commands.hpp"
#include "helixmla/environment.hpp"
#include "helixmla/error.hpp"
#include "helixmla/perf_table.hpp"
#include "helixmla/planner.hpp"
#include "integer_flag.hpp"
#include "output_file.hpp"
#include "problem_flags.hpp"

#if defined(HELIXMLA_WITH_CUDA)
#include "bench_case_runner.hpp"
#endif

namespace helixmla::tools {

namespace {

struct TuneFlags {
  std::string suite = std::string(HELIXMLA_SOURCE_DIR) + "/bench/mla-decode-v1.csv";
  std::string out;
  std::vector<int> heads = {16, 32, 48, 64, 96, 128};
  std::vector<int> q_lens = {1, 2, 4};
  std::vector<int> page_sizes = {16, 32, 64, 128};
  std::vector<int> batches = {1, 8, 64};
  std::vector<std::string> kv_dtypes = {"bf16", "fp8"};
  int kv_len = 4096;
  int iterations = 20;
};

// Calls `visit` with every case of the grid, its per-request kv_len list
// left empty: a --batches 1048576 case's holds a million lengths.
template <typename Visit>
void for_each_grid_case(const TuneFlags& flags, Visit visit) {
  int id = 1000;
  for (int h : flags.heads)
    for (int q : flags.q_lens)
      for (int p : flags.page_sizes)
        for (int b : flags.batches)
          for (const auto& d : flags.kv_dtypes) {
            BenchCase c;
            c.id = id++;
            c.heads = h;
            c.q_len = q;
            c.batch = b;
            c.page_size = p;
            c.kv_dtype = *parse_kv_dtype(d);
            visit(std::move(c));
          }
}

// Every grid case held to what `run` and a suite line are held to, before
// the GPU is looked for and without building the cases' lists.
void check_grid(const TuneFlags& flags) {
  for (int q : flags.q_lens) {
    if (q > flags.kv_len) {
      throw CLI::ValidationError("--q-lens", fmt::format("{} is longer than --kv-len {}: new tokens are part of the KV",
                                                         q, flags.kv_len));
    }
  }
  for_each_grid_case(flags, [&flags](const BenchCase& c) {
    testing::BatchSpec spec = batch_spec_of(c, 1);
    spec.kv_len = {flags.kv_len};  // cycled over the requests
    if (const std::string complaint = host_footprint_complaint(spec); !complaint.empty()) {
      throw CLI::ValidationError("--heads/--q-lens/--page-sizes/--batches/--kv-dtypes/--kv-len",
                                 fmt::format("the grid case of {} heads, q_len {}, page size {}, batch {}, {} KV: {}",
                                             c.heads, c.q_len, c.page_size, c.batch, to_string(c.kv_dtype),
                                             complaint));
    }
  });
}

// The suite's cases and then the grid's, with their lists.
std::vector<BenchCase> tuning_grid(const TuneFlags& flags, std::vector<BenchCase> suite) {
  for_each_grid_case(flags, [&flags, &suite](BenchCase c) {
    c.kv_len.assign(static_cast<std::size_t>(c.batch), flags.kv_len);
    suite.push_back(std::move(c));
  });
  return suite;
}

#if defined(HELIXMLA_WITH_CUDA)
PhaseShape generation_shape(const BenchCase& c) {
  testing::BatchSpec spec = batch_spec_of(c, 1);
  spec.allocate_tensors = false;
  testing::SyntheticBatch batch(spec);
  const Problem problem = batch.problem();
  PhaseShape shape = shape_of(*plan_phases(problem).generation, problem);
  shape.on_device = true;
  return shape;
}
#endif

int run_tune(const TuneFlags& flags) {
  // Bad flags are reported as such on any machine, before the GPU is looked for.
  check_grid(flags);
  std::vector<BenchCase> suite = load_suite(flags.suite);
  if (!flags.out.empty()) require_writable_file(flags.out, "--out");
#if defined(HELIXMLA_WITH_CUDA)
  require_cuda_gpu(Environment::detect(), "tune");
  const std::vector<BenchCase> grid = tuning_grid(flags, std::move(suite));
  CaseRunner runner;
  const Environment& env = runner.environment();
  const std::string out = flags.out.empty()
                              ? std::string(HELIXMLA_SOURCE_DIR) + "/data/perf/" + std::string(to_string(env.arch)) + ".json"
                              : flags.out;
  if (flags.out.empty()) require_writable_file(out, "--out");
  const Selector selector(builtin_backends(), env);
  PerfTable table;
  std::size_t done = 0;
  for (const BenchCase& c : grid) {
    const PhaseShape shape = generation_shape(c);
    const Decision decision = selector.select_uncached(shape);
    for (const Candidate& candidate : decision.candidates) {
      if (!candidate.capable || candidate.backend == "cpu") continue;
      CaseOptions options;
      options.iterations = flags.iterations;
      options.verify = false;
      options.backend = candidate.backend;
      const CaseResult r = runner.run(c, options);
      table.record(PerfKey::of(shape, env.arch), candidate.backend, r.timing.queued_median_us);
    }
    if (++done % 20 == 0 || done == grid.size()) {
      std::cerr << fmt::format("tune: {}/{} shapes measured\n", done, grid.size());
    }
  }
  table.save(out);
  std::cout << fmt::format("tune: wrote {} entries to {}\n", table.size(), out);
  return 0;
#else
  (void)suite;
  std::cerr << "helixmla tune: this build has no CUDA backends to measure\n";
  return 1;
#endif
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto flags = std::make_shared<TuneFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Measure the capable backends on this machine's CUDA GPU (one is needed) and write the selector's "
              "performance table");
  cmd->add_option("--suite", flags->suite, "Suite CSV measured in addition to the grid")
      ->capture_default_str()
      ->check(unreadable_file_complaint);
  cmd->add_option("--out", flags->out,
                  "Table to write; default: data/perf/<arch>.json in the source tree, which overwrites the table "
                  "shipped for this GPU's architecture")
      ->check(non_empty());
  // The same ranges as `run`'s flags.
  add_int_list(*cmd, "--heads", flags->heads, 1, 128, "Grid: head counts");
  add_int_list(*cmd, "--q-lens", flags->q_lens, 1, 1 << 20, "Grid: q_len values");
  add_int_list(*cmd, "--page-sizes", flags->page_sizes, 1, 1 << 20, "Grid: page sizes");
  add_int_list(*cmd, "--batches", flags->batches, 1, 1 << 20, "Grid: batch sizes");
  add_name_list(
      *cmd, "--kv-dtypes", flags->kv_dtypes, kv_dtype_complaint,
      [](const std::string& value) { return std::string(to_string(*parse_kv_dtype(value))); }, "Grid: KV dtypes");
  cmd->add_option("--kv-len", flags->kv_len, "Grid: cached tokens per request")->capture_default_str()
      ->transform(integer_in(1, 1 << 24));
  cmd->add_option("--iterations", flags->iterations, "Timed iterations per measurement")->capture_default_str()
      ->transform(integer_in(1, 100000));
  cmd->callback([flags] {
    if (const int code = run_tune(*flags); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace helixmla::tools

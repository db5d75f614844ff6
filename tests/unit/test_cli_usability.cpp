// What a new user of the `helixmla` program meets on a machine without a
// GPU: help that matches what runs, output sized for a terminal, flag errors
// before the GPU is looked for. Run on the binary this build produced, with
// CUDA_VISIBLE_DEVICES empty so a GPU machine behaves as one without.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_runner.hpp"

namespace {

using helixmla::testing::cli_path;
using helixmla::testing::CliOutcome;
bool has(const std::string& text, const std::string& part) { return helixmla::testing::contains(text, part); }

// A path of this test process's own under the temporary directory.
std::filesystem::path scratch(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("helixmla-usability-" + std::to_string(getpid()) + "-" + name);
}

// `helixmla args` with no GPU visible, so a GPU machine answers as one
// without; stdout and stderr apart, since what goes where is checked.
CliOutcome helixmla(const std::string& args) { return helixmla::testing::run_cli(args, "CUDA_VISIBLE_DEVICES="); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// `args` is a bad flag value: exit status 2, `message` and the help hint, and
// no word of a GPU (the flags come before looking for one).
void expect_refused(const std::string& args, const std::string& message) {
  const CliOutcome o = helixmla(args);
  EXPECT_EQ(o.code, 2) << args << ": " << o.err;
  EXPECT_TRUE(has(o.err, message)) << args << ": " << o.err;
  EXPECT_TRUE(has(o.err, "Run 'helixmla --help'")) << args << ": " << o.err;
  EXPECT_FALSE(has(o.err, "GPU")) << args << ": " << o.err;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

class CliUsability : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(cli_path())) GTEST_SKIP() << cli_path() << " is not built";
    std::filesystem::create_directories(out_);
  }
  void TearDown() override { std::filesystem::remove_all(out_); }

  const std::filesystem::path out_ = scratch("out");
};

// Without --arch, a profile that does not cover this machine (here: none) is
// explained on its first architecture, and the assumption is said on stderr.
TEST_F(CliUsability, ExplainAssumesTheProfileArchitectureWhereItDoesNotCoverTheMachine) {
  std::mt19937 random(std::random_device{}());
  for (int i = 0; i < 4; ++i) {
    const int heads = std::uniform_int_distribution<int>(1, 128)(random);
    const int cp = std::uniform_int_distribution<int>(1, 4)(random);
    const std::string args =
        "explain --profile trtllm-before --heads " + std::to_string(heads) + " --cp " + std::to_string(cp);
    const CliOutcome o = helixmla(args);
    EXPECT_NE(o.code, 2) << args << ": " << o.err;
    EXPECT_TRUE(has(o.err, "explain: assuming sm100 for profile trtllm-before (it covers sm100, sm103): this "
                           "machine has no GPU"))
        << args << ": " << o.err;
    EXPECT_TRUE(has(o.out, "on sm100 (NVRTC")) << args << ": " << o.out;
    EXPECT_FALSE(has(o.out, "this is none")) << args << ": " << o.out;
  }
  // The walkthrough's case: Kimi K3's Helix decode is served by the fixed profile.
  CliOutcome o = helixmla("explain --profile trtllm --heads 48 --cp 2");
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_TRUE(has(o.out, "choice: cute_dsl")) << o.out;

  // --json stays one JSON document and names the architecture explained.
  o = helixmla("explain --profile trtllm --heads 48 --cp 2 --json");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out).at("arch"), "sm100") << o.out;

  // --arch is obeyed as given, with nothing assumed.
  o = helixmla("explain --profile trtllm --arch none --heads 48 --cp 2");
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_TRUE(has(o.out, "on none")) << o.out;
  EXPECT_FALSE(has(o.err, "assuming")) << o.err;

  EXPECT_TRUE(has(helixmla("explain --help").out, "the profile's first architecture when it does not cover"));
}

// A profile that covers this machine is explained on it.
TEST_F(CliUsability, ExplainKeepsTheMachineAProfileCovers) {
  std::string text = read_file(std::string(HELIXMLA_SOURCE_DIR) + "/profiles/trtllm.json");
  const std::string scope = "\"archs\": [\"sm100\", \"sm103\"], \"phases\"";
  const std::size_t at = text.find(scope);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, scope.size(), "\"archs\": [\"sm100\", \"none\"], \"phases\"");
  const std::filesystem::path profile = out_ / "covers-none.json";
  std::ofstream(profile) << text;
  const CliOutcome o = helixmla("explain --profile " + profile.string() + " --heads 48 --cp 2");
  EXPECT_EQ(o.code, 1) << o.err;  // no profile backend is available on none
  EXPECT_TRUE(has(o.out, "on none")) << o.out;
  EXPECT_FALSE(has(o.err, "assuming")) << o.err;
}

// 31,744 unroutable shapes: stdout lists the first 20 and counts the rest;
// --list-all and --json have them all.
TEST_F(CliUsability, SweepListsTheFirstUnroutableShapesAndCountsTheRest) {
  const std::string sweep = "sweep --profile trtllm --out " + out_.string();
  CliOutcome o = helixmla(sweep);
  EXPECT_EQ(o.code, 1) << o.err;
  const std::string header = "shapes no backend can run: ";
  const std::size_t at = o.out.find(header);
  ASSERT_NE(at, std::string::npos) << o.out;
  const long total = std::stol(o.out.substr(at + header.size()));
  ASSERT_GT(total, 20);
  EXPECT_TRUE(has(o.out, "  ... and " + std::to_string(total - 20) +
                             " more (--list-all prints them all; --json lists them all as JSON)\n"))
      << o.out;
  EXPECT_LT(lines_of(o.out).size(), 200u);

  o = helixmla(sweep + " --list-all");
  long listed = 0;
  for (const std::string& line : lines_of(o.out)) listed += line.starts_with("  sm10") ? 1 : 0;
  EXPECT_EQ(listed, total);
  EXPECT_FALSE(has(o.out, "more (--list-all"));

  o = helixmla(sweep + " --json");
  EXPECT_EQ(nlohmann::json::parse(o.out).at("unroutable").size(), static_cast<std::size_t>(total));
}

// The help describes the space the run sweeps, in the run's own words.
TEST_F(CliUsability, SweepHelpNamesTheSpaceTheRunSweeps) {
  const CliOutcome run = helixmla("sweep --arch none --out " + out_.string());
  EXPECT_EQ(run.code, 0) << run.err;
  const std::string marker = "architecture(s): ";
  const std::size_t at = run.err.find(marker);
  ASSERT_NE(at, std::string::npos) << run.err;
  const std::string space = run.err.substr(at + marker.size(), run.err.find('\n', at) - at - marker.size());
  EXPECT_TRUE(has(space, "pages 1,2,3,4,8,16,32,48,64,96,128,256")) << space;
  const CliOutcome help = helixmla("sweep --help");
  EXPECT_TRUE(has(help.out, "(" + space + ")")) << help.out;
}

// A profile whose kernel lookup is deferred leaves no shape unroutable, yet a
// sweep that finds lookups failing at run time exits 1: the help says both.
TEST_F(CliUsability, SweepHelpCountsShapesThatFailAtRunAsFailures) {
  const std::filesystem::path profile = out_ / "at-run.json";
  std::ofstream(profile) << R"({"version": 1, "name": "at-run", "scope": {"archs": ["sm100"], "phases": ["generation"]},
    "backends": [{"name": "late", "priority": 1, "archs": ["sm100"],
      "kernels": {"lookup": "at_run", "families": [{"name": "k", "precompiled_page_sizes": [32]}]}}]})";
  const CliOutcome o = helixmla("sweep --profile " + profile.string() + " --out " + out_.string());
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_TRUE(has(o.out, "shapes no backend can run: 0\n")) << o.out;
  EXPECT_TRUE(has(o.out, "shapes whose chosen backend fails at run time: ")) << o.out;
  const std::string help = helixmla("sweep --help").out;
  EXPECT_TRUE(has(help, "looks its kernel up only at run time and finds none; exit 0 when there is neither, 1 "
                        "otherwise")) << help;
}

// A sweep of a second or two prints no progress; a longer one at most a line
// every two seconds, ending at 100%.
TEST_F(CliUsability, SweepProgressIsSparse) {
  const auto begin = std::chrono::steady_clock::now();
  const CliOutcome o = helixmla("sweep --out " + out_.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(o.code, 0) << o.err;
  std::vector<std::string> progress;
  for (const std::string& line : lines_of(o.err)) {
    if (line.starts_with("sweep: ") && line.find("% (") != std::string::npos) progress.push_back(line);
  }
  EXPECT_LE(progress.size(), static_cast<std::size_t>(seconds / 2.0) + 1) << seconds << " s:\n" << o.err;
  if (!progress.empty()) EXPECT_TRUE(progress.back().starts_with("sweep: 100% (")) << o.err;
  EXPECT_TRUE(o.out.starts_with("sweep of built-in backends")) << "progress goes to stderr: " << o.out;
}

// A suite of one small case, so that even a run that found a GPU would be short.
std::filesystem::path small_suite(const std::filesystem::path& folder) {
  const std::filesystem::path suite = folder / "small.csv";
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n1,16,1,1,256,64,bf16,small\n";
  return suite;
}

TEST_F(CliUsability, TuneChecksItsFlagsBeforeLookingForAGpu) {
  const std::string missing = (out_ / "no-such-suite.csv").string();
  expect_refused("tune --suite " + missing, "--suite: '" + missing + "' cannot be opened for reading");
  expect_refused("tune --out /nonexistent-helixmla-dir/x.json", "--out: '/nonexistent-helixmla-dir/x.json'");
  // Every grid case is held to what `run` holds a batch to.
  expect_refused("tune --q-lens 8192 --kv-len 16", "--q-lens: 8192 is longer than --kv-len 16");
  expect_refused("tune --heads 128 --batches 1048576 --kv-len 1000000",
                 "the grid case of 128 heads, q_len 1, page size 16, batch 1048576, bf16 KV: this batch needs");

  const std::string grid = " --heads 16 --q-lens 1 --page-sizes 64 --batches 1 --kv-dtypes bf16 --iterations 1";
  const CliOutcome o =
      helixmla("tune --suite " + small_suite(out_).string() + " --out " + (out_ / "t.json").string() + grid);
  EXPECT_EQ(o.code, 1) << o.err;
#if defined(HELIXMLA_WITH_CUDA)
  EXPECT_TRUE(has(o.err, "tune needs a CUDA GPU; none was found")) << o.err;
#endif

  const std::string help = helixmla("tune --help").out;
  EXPECT_TRUE(has(help, "CUDA GPU (one is needed)")) << help;
  EXPECT_TRUE(has(help, "overwrites the table shipped")) << help;
}

TEST_F(CliUsability, BenchChecksItsFlagsBeforeLookingForAGpu) {
  expect_refused("bench --backend bogus", "--backend: unknown backend bogus; this build has cpu");
  // Every other flag is valid here: only the backend name is wrong.
  expect_refused("bench --no-graphs --no-verify --cases 1 --suite " + small_suite(out_).string() + " --backend nope",
                 "unknown backend nope");
  const std::string missing = (out_ / "nope.csv").string();
  expect_refused("bench --suite " + missing, "--suite: '" + missing + "' cannot be opened for reading");
  EXPECT_TRUE(has(helixmla("bench --help").out, "CUDA GPU (one is needed"));
}

// Case ids are those a suite can hold, and flags show no CLI11 defaults.
TEST_F(CliUsability, BenchHelpShowsSensibleRangesAndPlainFlags) {
  const std::string help = helixmla("bench --help").out;
  EXPECT_TRUE(has(help, "--cases INT[,INT...] in [1 - 1073741824]")) << help;
  EXPECT_FALSE(has(help, "-2147483648")) << help;
  EXPECT_FALSE(has(help, "{false}")) << help;
  EXPECT_TRUE(has(help, "  --no-graphs ")) << help;
  EXPECT_TRUE(has(help, "  --no-verify ")) << help;
  expect_refused("bench --cases 0", "--cases: entry 0 ('0') of '0' is outside [1, 1073741824]");
}

// A single integer flag says whether its text is no integer or one out of
// range (CLI11's range check called "8.5" out of range), on every command.
TEST_F(CliUsability, IntegerFlagsSayWhetherTheTextIsAnIntegerOrOutOfRange) {
  const std::pair<const char*, const char*> refused[] = {
      {"run --heads 8.5", "--heads: '8.5' is not an integer"},
      {"explain --heads 200", "--heads: '200' is outside [1, 128]"},
      {"run --batch -1", "--batch: '-1' is outside [0, 1048576]"},
      {"run --repeat 1e3", "--repeat: '1e3' is not an integer"},
      {"run --heads 99999999999999999999", "--heads: '99999999999999999999' is outside [1, 128]"},
      {"explain --page-size 16.0", "--page-size: '16.0' is not an integer"},
      {"trace --steps 0x10", "--steps: '0x10' is not an integer"},
      {"tune --iterations 0", "--iterations: '0' is outside [1, 100000]"},
      {"bench --iterations two", "--iterations: 'two' is not an integer"},
  };
  for (const auto& [args, message] : refused) expect_refused(args, message);
  EXPECT_TRUE(has(helixmla("run --help").out, "--heads INT:INT in [1 - 128]"));
  // Leading zeros are decimal, as the check reads them (CLI11 alone read
  // "010" as octal 8 and refused "08").
  for (const char* heads : {"010", "08"}) {
    const CliOutcome o = helixmla(std::string("run --backend cpu --batch 1 --kv-len 64 --repeat 1 --heads ") + heads);
    EXPECT_EQ(o.code, 0) << heads << ": " << o.err;
    EXPECT_TRUE(has(o.out, std::string("helixmla run: ") + (heads[1] == '1' ? "10" : "8") + " heads")) << o.out;
  }
}

// A flag the command does not have is answered with the nearest one it has,
// where one is close; a name far from all of them gets no guess.
TEST_F(CliUsability, AMisspeltFlagGetsTheNearestOne) {
  const std::pair<const char*, const char*> misspelt[] = {
      {"run --head 48", "--head: did you mean --heads?"},
      {"explain --kvlen 100", "--kvlen: did you mean --kv-len?"},
      {"explain --page 16", "--page: did you mean --page-size?"},
      {"tune --page-size 16", "--page-size: did you mean --page-sizes?"},
      {"run --seeed=3", "--seeed=3: did you mean --seed?"},
      {"explain --kv 3", "--kv: did you mean --kv-len or --kv-dtype?"},  // every flag as near
  };
  for (const auto& [args, message] : misspelt) expect_refused(args, message);
  // No name, or a flag before the command: nothing to suggest from the command's flags.
  for (const char* args : {"run --=5", "--head 8 run"}) {
    const CliOutcome o = helixmla(args);
    EXPECT_EQ(o.code, 2) << args << ": " << o.err;
    EXPECT_FALSE(has(o.err, "did you mean")) << args << ": " << o.err;
  }
  const CliOutcome far = helixmla("run --temperature 2");
  EXPECT_EQ(far.code, 2) << far.err;
  EXPECT_TRUE(has(far.err, "--temperature")) << far.err;
  EXPECT_FALSE(has(far.err, "did you mean")) << far.err;
}

// A just-in-time kernel is named once, with the selector's "(JIT)", not a
// second time by the backend's own note.
TEST_F(CliUsability, ExplainNamesAJitKernelOnce) {
#if defined(HELIXMLA_WITH_CUDA)
  std::mt19937 rng(std::random_device{}());
  const int page = std::uniform_int_distribution<int>(5, 15)(rng) | 1;  // odd: never a precompiled page size
  const CliOutcome o = helixmla("explain --arch sm90 --heads 64 --batch 2 --kv-len 256 --page-size " +
                                std::to_string(page));
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string kernel = "tc_m64_p" + std::to_string(page) + "_bf16_bf16_";
  bool seen = false;
  for (const std::string& line : lines_of(o.out)) {
    const std::size_t first = line.find(kernel);
    if (first == std::string::npos) continue;
    seen = true;
    EXPECT_TRUE(has(line, "(JIT)")) << line;
    EXPECT_EQ(line.find(kernel, first + 1), std::string::npos) << line;
  }
  EXPECT_TRUE(seen) << o.out;
#else
  GTEST_SKIP() << "a build without CUDA has no tensor-core kernels to name";
#endif
}

}  // namespace

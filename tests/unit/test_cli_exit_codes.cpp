// The `helixmla` program's verdicts: exit 0 for success, 1 for a failed run,
// 2 for a bad flag value; run on the binary this build produced.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "support/cli_runner.hpp"

namespace {

using helixmla::testing::cli_path;
using helixmla::testing::CliOutcome;
using helixmla::testing::run_cli;
bool has(const std::string& text, const std::string& part) { return helixmla::testing::contains(text, part); }

CliOutcome helixmla(const std::string& args) { return run_cli(args); }

// A temporary path of this process's own: two build trees' tests may run at once.
std::filesystem::path scratch_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("helixmla-" + std::to_string(getpid()) + "-" + name);
}

// `args` is a bad flag value: exit status 2 and a message containing `message`.
void expect_refused(const std::string& args, const std::string& message) {
  const CliOutcome o = helixmla(args);
  EXPECT_EQ(o.code, 2) << args << ": " << o.both();
  EXPECT_TRUE(has(o.both(), message)) << args << ": " << o.both();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(cli_path())) GTEST_SKIP() << cli_path() << " is not built";
  }
};

// `run --backend cpu` keeps its tensors in host memory on any machine, so
// `explain` must describe the same shape (on a GPU build that claims sm90).
TEST_F(Cli, ExplainWithTheCpuBackendDescribesHostTensors) {
  const CliOutcome o = helixmla("explain --arch sm90 --backend cpu --heads 16 --kv-len 256 --batch 2 --json");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), " host\"")) << o.both();
  EXPECT_FALSE(has(o.both(), " device\"")) << o.both();
}

TEST_F(Cli, AnUnknownBackendIsABadFlagValue) {
  expect_refused("explain --backend bogus --heads 16 --kv-len 256", "unknown backend bogus; this build has cpu");

  // A profile's backends are the known names there; the built-in ones are not.
  expect_refused("explain --profile trtllm --arch sm100 --backend cpu --heads 16 --kv-len 256",
                 "unknown backend cpu; profile trtllm has cute_dsl, flashinfer_trtllm_gen, fallback");

  expect_refused("run --backend bogus --heads 16 --kv-len 256", "unknown backend bogus");
}

// The peer exchange needs one GPU per rank: asked for without --devices it
// is a bad flag value on any machine, not a failure later.
TEST_F(Cli, PeerExchangeWithoutDevicesIsABadFlagValue) {
  expect_refused("run --cp 2 --exchange peer --heads 16 --kv-len 64 --batch 1",
                 "--exchange: peer needs one GPU per rank");
  expect_refused("run --cp 2 --exchange nccl --heads 16 --kv-len 64 --batch 1",
                 "--exchange: nccl needs one GPU per rank");
  expect_refused("run --cp 2 --exchange carrier-pigeon --heads 16 --kv-len 64 --batch 1", "--exchange");
}

// A repeated item would run the same work twice; only --kv-len's lengths
// (cycled over the requests) may repeat.
TEST_F(Cli, ListsRefuseRepeatedItems) {
  expect_refused("sweep --arch sm90,sm90", "--arch: entry 1 ('sm90') of 'sm90,sm90' repeats an earlier entry");
  expect_refused("sweep --arch sm90,sm_90a", "--arch: entry 1 ('sm_90a') of 'sm90,sm_90a' repeats an earlier entry");
  expect_refused("tune --kv-dtypes fp8,e4m3", "--kv-dtypes: entry 1 ('e4m3') of 'fp8,e4m3' repeats an earlier entry");
  expect_refused("bench --cases 1,1", "--cases: entry 1 ('1') of '1,1' repeats an earlier entry");
  expect_refused("run --cp 2 --devices 0,0 --heads 16 --kv-len 64 --batch 1", "--devices");
  expect_refused("tune --heads 16 --heads 16", "--heads");
  const CliOutcome o = helixmla("run --backend cpu --kv-len 64,64 --batch 2 --heads 4 --repeat 1");
  EXPECT_EQ(o.code, 0) << o.both();
}

// --version answers with the project's version, not "A subcommand is required".
TEST_F(Cli, VersionIsPrinted) {
  const CliOutcome o = helixmla("--version");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "helixmla 0.")) << o.both();
}

// A misspelt command is named, not reported as a missing one.
TEST_F(Cli, AnUnknownCommandIsNamed) {
  expect_refused("rnu --heads 16", "unknown command 'rnu'; the commands are run, explain");
}

// A flag before any command is named, and a command's flag given before its
// name says where it goes, instead of "A subcommand is required".
TEST_F(Cli, AFlagBeforeTheCommandIsNamed) {
  expect_refused("--bogus", "--bogus is not an option of the program");
  expect_refused("--heads 16", "--heads is not an option of the program; it is an option of run, explain, tune, "
                               "trace: give it after the command's name");
  expect_refused("--max-seconds=5 sweep --execute", "--max-seconds is not an option of the program; it is an "
                                                    "option of sweep");
  const CliOutcome o = helixmla("--version");
  EXPECT_EQ(o.code, 0) << o.both();
}

// Input files are read up to a bound (a device or pipe has no size), and a
// number past int64 in a profile is out of range, not wrapped to -1.
TEST_F(Cli, InputFilesAreReadWithinBounds) {
  expect_refused("explain --profile /dev/zero", "larger than 64 MiB");
  expect_refused("explain --perf-table /dev/zero", "larger than 64 MiB");
  expect_refused("bench --suite /dev/zero", "larger than 64 MiB");

  std::ifstream shipped(std::string(HELIXMLA_SOURCE_DIR) + "/profiles/trtllm.json");
  std::string text((std::istreambuf_iterator<char>(shipped)), std::istreambuf_iterator<char>());
  const std::size_t at = text.find("\"priority\": 300");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"priority\": 300").size(), "\"priority\": 18446744073709551615");
  const std::filesystem::path profile = scratch_path("huge-priority.json");
  std::ofstream(profile) << text;
  expect_refused("explain --profile " + profile.string() + " --arch sm100 --heads 16 --kv-len 64",
                 "priority = 18446744073709551615: is out of range");
  std::filesystem::remove(profile);
}

// Flags that would fail only after minutes of work, or deep inside it, are
// rejected first.
TEST_F(Cli, SweepAndTuneCheckTheirFlagsBeforeWorking) {
  const std::filesystem::path file = scratch_path("not-a-folder");
  std::ofstream(file) << "x";
  CliOutcome o = helixmla("sweep --arch sm90 --out " + file.string());
  std::filesystem::remove(file);
  EXPECT_EQ(o.code, 2) << o.both();
  EXPECT_TRUE(has(o.both(), "--out")) << o.both();
  EXPECT_FALSE(has(o.both(), "sweep:")) << "rejected before sweeping: " << o.both();

  // A folder that exists but takes no file (root may write anywhere access() asks about).
  o = helixmla("sweep --arch sm90 --out /proc");
  EXPECT_EQ(o.code, 2) << o.both();
  EXPECT_TRUE(has(o.both(), "--out: '/proc': no file can be created in it")) << o.both();
  EXPECT_FALSE(has(o.both(), "sweep:")) << "rejected before sweeping: " << o.both();

  for (const char* bad : {"0", "nan", "-3"}) {
    expect_refused(std::string("sweep --execute --max-seconds ") + bad,
                   std::string("--max-seconds: '") + bad + "' is not a number of seconds");
  }
  // A budget without --execute would change nothing; --execute draws no
  // pictures, runs this GPU's architecture and lists every combination.
  expect_refused("sweep --arch none --max-seconds 5", "--max-seconds requires --execute");
  expect_refused("sweep --execute --out /tmp/pictures", "--out excludes --execute");
  expect_refused("sweep --execute --arch sm80", "--arch excludes --execute");
  expect_refused("sweep --execute --list-all", "--list-all excludes --execute");
  for (const char* bad : {"--heads 0,1000", "--batches -1", "--page-sizes 0", "--q-lens 0"}) {
    expect_refused(std::string("tune ") + bad, std::string(bad).substr(0, std::string(bad).find(' ')));
  }
}

// A batch that would not fit in host memory is a flag error naming the
// sizes, not a bad_alloc or the OOM killer after minutes.
TEST_F(Cli, BatchesBeyondHostMemoryAreBadFlagValues) {
  expect_refused("explain --heads 128 --batch 100000 --kv-len 1000000", "(11.6 GiB of page table)");
  // The KV pool dominates here; below, the contexts' queries and outputs count too.
  expect_refused("run --heads 128 --batch 4096 --kv-len 1000000", "GiB of host memory");
  // One request's 4 GB pool fits, but the float64 check decodes its KV at 8
  // bytes a value (16 GB).
  expect_refused("run --heads 1 --batch 1 --kv-len 3500000", "GiB of host memory");
  expect_refused("run --heads 128 --batch 16 --q-len 16 --kv-len 16 --contexts 4 --context-len 1048576",
                 "host memory");
}

// Every layer of `run --layers` holds tensors and a page table of its own,
// so the limit counts them all, before any is built. One layer of this
// batch (~9.7 GiB) is accepted; it is not run here, as it would be allocated.
TEST_F(Cli, RunCountsEveryLayerAgainstHostMemory) {
  const std::string batch = "run --backend cpu --heads 1 --batch 1024 --kv-len 8192 --repeat 1";
  expect_refused(batch + " --layers 2", "--layers: 2 layers of this batch need");
  expect_refused(batch + " --layers 64", "GiB of page table each); the limits are 16 GiB in all");
}

// `explain` refuses what the library would refuse a run of the same batch,
// though it builds no tensors: here 2^31 query tokens, past int32.
TEST_F(Cli, ExplainRefusesWhatTheLibraryRefuses) {
  expect_refused("explain --heads 128 --batch 2048 --q-len 1048576 --kv-len 1048576 --page-size 1048576",
                 "invalid q_len = 2147483648: total tokens (sum of q_len) must fit int32");
  expect_refused("explain --heads 4 --batch 0 --contexts 1 --kv-len 5,5,5", "--kv-len: sets the generations");
}

// An empty value would act as the flag not given (the selector's choice,
// the built-in backends, the shipped table), not as what was typed.
TEST_F(Cli, EmptyValuesAreRefused) {
  for (const char* args : {"explain --profile ''", "explain --perf-table ''", "run --backend ''",
                           "explain --backend ''", "sweep --profile ''", "bench --backend ''", "bench --json ''",
                           "tune --out ''"}) {
    expect_refused(args, "must not be empty");
  }
}

// The printed result is what a command is for: output that could not be
// written fails the command.
TEST_F(Cli, UnwrittenOutputFailsTheCommand) {
  for (const char* args : {"explain --heads 16 --batch 2 --json", "run --backend cpu --heads 4 --batch 1 --kv-len 64 "
                                                                   "--repeat 1"}) {
    const CliOutcome o = helixmla(std::string(args) + " > /dev/full");
    EXPECT_EQ(o.code, 1) << args << ": " << o.both();
    EXPECT_TRUE(has(o.err, "could not be written to standard output")) << args << ": " << o.both();
  }
}

// Values a CLI parser would quietly change (a wrapped or saturated seed, a
// dropped empty list item) are flag errors naming the flag and the entry.
TEST_F(Cli, SeedsAndCommaListsAreReadExactly) {
  expect_refused("explain --heads 16 --batch 2 --seed -1", "--seed: '-1' is not an integer");
  expect_refused("explain --heads 16 --batch 2 --seed 18446744073709551616", "--seed");  // one past 2^64 - 1
  CliOutcome o = helixmla("explain --heads 16 --batch 2 --seed 18446744073709551615 --json");
  EXPECT_EQ(o.code, 0) << o.both();
  // Every comma list of the program reads the same way.
  const std::pair<const char*, const char*> refused[] = {
      {"explain --heads 16 --batch 3 --kv-len 100,,200", "entry 1 of '100,,200' is empty"},
      {"explain --heads 16 --batch 3 --kv-len 100,200,", "entry 2 of '100,200,' is empty"},
      {"explain --heads 16 --batch 3 --kv-len 100,2x0", "entry 1 ('2x0') of '100,2x0' is not an integer"},
      {"explain --heads 16 --batch 3 --kv-len 100,0", "entry 1 ('0') of '100,0' is outside [1, 1073741824]"},
      {"explain --heads 16 --batch 3 --kv-len 100 --kv-len 200,,5", "entry 1 of '200,,5' is empty"},
      {"tune --heads 16,,32", "--heads: entry 1 of '16,,32' is empty"},
      {"tune --kv-dtypes bf16,int4", "entry 1 ('int4') of 'bf16,int4'"},
      {"tune --kv-dtypes fp8,fp32", "entry 1 ('fp32') of 'fp8,fp32': expected bf16, fp16 or fp8"},
      {"explain --heads 16 --batch 2 --kv-dtype fp32", "--kv-dtype: 'fp32': expected bf16, fp16 or fp8"},
      {"sweep --arch sm90,", "--arch: entry 1 of 'sm90,' is empty"},
      {"bench --cases 1,,2", "--cases: entry 1 of '1,,2' is empty"},
      {"run --cp 2 --devices 0,-1", "--devices: entry 1 ('-1') of '0,-1' is outside"},
  };
  for (const auto& [args, message] : refused) expect_refused(args, message);
  o = helixmla("explain --heads 16 --batch 3 --kv-len 100,300,200 --json");
  EXPECT_EQ(o.code, 0) << o.both();
}

// `sweep --profile` skips phases outside the profile's scope; `explain` shows
// them as such instead of failing for want of a backend.
TEST_F(Cli, ExplainShowsPhasesOutsideTheProfileScopeWithoutFailing) {
  const std::string batch =
      "explain --profile trtllm --arch sm100 --cp 2 --q-len 2 --contexts 2 --heads 24 --kv-len 256 --batch 2";
  CliOutcome o = helixmla(batch);
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "phase context\nshape: context")) << o.both();
  EXPECT_TRUE(has(o.both(), "outside the profile's scope")) << o.both();
  EXPECT_TRUE(has(o.both(), "phase generation")) << o.both();

  o = helixmla(batch + " --json");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "\"outside_scope\": true")) << o.both();
  EXPECT_TRUE(has(o.both(), "\"outside_scope\": false")) << o.both();
}

// With --stats the softmax statistics are checked too, not only the output.
TEST_F(Cli, RunChecksTheStatsItWasAskedFor) {
  CliOutcome o = helixmla("run --backend cpu --stats --heads 8 --kv-len 100 --batch 2 --contexts 1 --repeat 1 --json");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "\"stats_ok\":true")) << o.both();
  EXPECT_TRUE(has(o.both(), "\"stats_max_m_err\":")) << o.both();
  EXPECT_TRUE(has(o.both(), "\"stats_max_l_rel_err\":")) << o.both();

  o = helixmla("run --backend cpu --stats --heads 8 --kv-len 100 --batch 2 --repeat 1");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "stats_m_err")) << o.both();

  o = helixmla("run --backend cpu --heads 8 --kv-len 100 --batch 2 --repeat 1 --json");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_FALSE(has(o.both(), "stats_ok")) << o.both();
}

// A flag that would change nothing in this run is refused, not dropped:
// Helix-only flags without Helix, --stats under Helix (the ranks' statistics
// are combined into the checked output), lengths past the batch or of
// requests it does not have.
TEST_F(Cli, RunRefusesFlagsItWouldIgnore) {
  for (const char* flag : {"--exchange nccl", "--no-graphs", "--no-baseline"}) {
    expect_refused(std::string("run --backend cpu --heads 8 --kv-len 64 --batch 1 ") + flag,
                   "applies to Helix runs only");
  }
  expect_refused("run --backend cpu --cp 2 --stats --heads 8 --kv-len 64 --batch 1", "--stats: a Helix run");
  expect_refused("run --backend cpu --heads 8 --kv-len 2048,64,1 --batch 1",
                 "--kv-len: 3 lengths for --batch 1");
  expect_refused("run --backend cpu --heads 8 --kv-len 100 --batch 0 --contexts 1", "--kv-len: sets the generations");
  expect_refused("run --backend cpu --heads 8 --kv-len 64 --batch 1 --context-len 100",
                 "--context-len: 100 sets the context requests' length, and --contexts 0 has none");
  expect_refused("run --backend cpu --heads 8 --batch 0 --contexts 1 --q-len 4",
                 "--q-len: 4 sets the generations' query tokens, and --batch 0 has none");
  const CliOutcome o = helixmla("run --backend cpu --cp 2 --no-graphs --heads 8 --kv-len 64 --batch 1 --repeat 1");
  EXPECT_EQ(o.code, 0) << o.both();
}

// The commands that share run's batch flags refuse the same dropped flags:
// a context length without contexts, a q_len without generations, and
// (explain) --stats that Helix turns on anyway.
TEST_F(Cli, ExplainAndTraceRefuseFlagsTheyWouldIgnore) {
  expect_refused("explain --heads 8 --kv-len 64 --batch 1 --context-len 100", "--context-len: 100");
  expect_refused("explain --heads 8 --batch 0 --contexts 1 --q-len 4", "--q-len: 4");
  expect_refused("explain --heads 8 --kv-len 64 --batch 1 --cp 2 --stats", "--stats: a Helix rank (--cp > 1)");
  expect_refused("trace --context-len 100", "--context-len: 100");
  const CliOutcome o = helixmla("explain --heads 8 --kv-len 64 --batch 1 --contexts 1 --context-len 100 --stats");
  EXPECT_EQ(o.code, 0) << o.both();
}

// HELIXMLA_DEVICE is read on every machine: a value that is no device index
// is an error naming the variable even where there is no GPU to choose.
TEST_F(Cli, AMalformedDeviceVariableIsRefused) {
  for (const char* value : {"abc", "-1", "0x1"}) {
    const CliOutcome o = run_cli("run --backend cpu --heads 8 --kv-len 64 --batch 1",
                                 std::string("HELIXMLA_DEVICE=") + value);
    EXPECT_EQ(o.code, 2) << o.both();
    // Before any device is counted, the variable has no upper bound to name.
    EXPECT_TRUE(has(o.both(), std::string("HELIXMLA_DEVICE = ") + value + ": must be an integer of at least 0"))
        << o.both();
  }
}

// Both timings `bench` reports: the queued median as time_us, the isolated
// one beside it (the same wall-clock median on the CPU).
TEST_F(Cli, RunReportsQueuedAndIsolatedTimes) {
  CliOutcome o = helixmla("run --backend cpu --heads 8 --kv-len 100 --batch 2 --repeat 1 --json");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "\"time_us\":")) << o.both();
  EXPECT_TRUE(has(o.both(), "\"isolated_us\":")) << o.both();

  o = helixmla("run --backend cpu --heads 8 --kv-len 100 --batch 2 --repeat 1");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "isolated_us")) << o.both();
}

// Single and Helix runs print one schema for what a script reads: the same
// keys name the shape, the time and the verdict, with values of the run.
TEST_F(Cli, SingleAndHelixRunsShareTheirJsonKeys) {
  const nlohmann::json single = nlohmann::json::parse(
      helixmla("run --backend cpu --heads 8 --kv-len 300 --batch 3 --repeat 2 --json").out);
  const nlohmann::json helix = nlohmann::json::parse(
      helixmla("run --backend cpu --heads 8 --kv-len 300 --batch 3 --repeat 2 --cp 3 --json").out);
  for (const char* key : {"backend", "cp", "device", "tokens", "layers", "time_us", "tolerance", "reference", "repeat",
                          "max_abs_err", "rel_l2_err", "non_finite", "pass"}) {
    EXPECT_TRUE(single.contains(key)) << key << ": " << single.dump();
    EXPECT_TRUE(helix.contains(key)) << key << ": " << helix.dump();
  }
  EXPECT_EQ(single["cp"], 1);
  EXPECT_EQ(helix["cp"], 3);
  for (const nlohmann::json& run : {single, helix}) {
    EXPECT_EQ(run["device"], "cpu");
    EXPECT_EQ(run["tokens"], 3);
    EXPECT_EQ(run["repeat"], 2);
    EXPECT_EQ(run["reference"], "naive float64");
    EXPECT_EQ(run["tolerance"], 1e-2);
    EXPECT_EQ(run["pass"], true);
    EXPECT_GT(run["time_us"].get<double>(), 0.0);
    EXPECT_GT(run["rel_l2_err"].get<double>(), 0.0);  // bf16 outputs are never exact
  }
  EXPECT_EQ(helix["time_us"], helix["total_us"]);  // no graph timing on the CPU
}

// --layers runs the step's other layers through the first layer's prepared
// run and checks each (a mixed batch with statistics: both phases' offsets).
TEST_F(Cli, RunChecksEveryLayerOfOnePreparedRun) {
  const CliOutcome o = helixmla(
      "run --backend cpu --layers 3 --stats --heads 8 --kv-len 100 --batch 3 --contexts 1 --repeat 1 --json");
  EXPECT_EQ(o.code, 0) << o.both();
  EXPECT_TRUE(has(o.both(), "\"layers\":3")) << o.both();
  EXPECT_TRUE(has(o.both(), "\"pass\":true")) << o.both();
  EXPECT_TRUE(has(o.both(), "\"non_finite\":0")) << o.both();
  expect_refused("run --layers 2 --cp 2 --heads 16 --kv-len 64 --batch 1", "--layers");
  expect_refused("run --layers 0 --heads 16 --kv-len 64 --batch 1", "--layers");
}

TEST_F(Cli, BenchRejectsCasesTheSuiteLacksAndRepeatedIds) {
  expect_refused("bench --cases 1,99", "case 99 is not in the suite");

  const std::filesystem::path suite = scratch_path("duplicate-ids.csv");
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "3,16,1,2,256,64,bf16,first\n"
                       << "4,16,1,2,256,64,bf16,other\n"
                       << "3,32,1,2,256,64,bf16,again\n";
  expect_refused("bench --suite " + suite.string(), "line 4 case = 3: duplicate case id; first on line 2");

  // CRLF line ends read like LF ones; a bad cell names the file, line and column.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\r\n"
                       << "3,16,1,2,256,64,bf16\r\n"
                       << "4,16,1,2000000,256,64,bf16\r\n";
  expect_refused("bench --suite " + suite.string(),
                 suite.string() + " line 3 batch = 2000000: is outside [1, 1048576]");

  // A mixed batch's lengths are ';'-separated; each one is checked.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "5,16,1,4,131072;2048;x,64,bf16\n";
  expect_refused("bench --suite " + suite.string(), suite.string() + " line 2 kv_len = x: is not an integer");

  // Cells read as the flags read: no sign, no space.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "5, 48,1,4,2048,64,bf16\n";
  expect_refused("bench --suite " + suite.string(), "line 2 heads =  48: is not an integer");
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "5,48,1,+1,2048,64,bf16\n";
  expect_refused("bench --suite " + suite.string(), "line 2 batch = +1: is not an integer");

  // Lengths past the batch's requests are refused, as `run --kv-len` refuses them.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "5,16,1,1,64;128;256,64,bf16\n";
  expect_refused("bench --suite " + suite.string(),
                 "line 2 kv_len = 64;128;256: 3 lengths for batch 1: the lengths past the batch's requests would "
                 "go unused");

  // The spread of "var" starts at 1024 tokens.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "1,48,2000,1,var,64,bf16,x\n";
  expect_refused("bench --suite " + suite.string(),
                 "line 2 kv_len = var: its shortest length, 1024, is shorter than q_len 2000");

  // A byte-order mark before the header is skipped: the first error is on line 2.
  std::ofstream(suite) << "\xEF\xBB\xBF" << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "1,129,1,2,256,64,bf16\n";
  expect_refused("bench --suite " + suite.string(), "line 2 heads = 129");

  // Without its header a suite would lose its first case; with no case it
  // would measure nothing and pass.
  std::ofstream(suite) << "1,128,1,128,4096,64,bf16,x\n";
  expect_refused("bench --suite " + suite.string(), "line 1 = 1,128,1,128,4096,64,bf16,x: expected the header case,");
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n";
  expect_refused("bench --suite " + suite.string(), "holds no cases");
  expect_refused("bench --suite " + std::filesystem::temp_directory_path().string(), "is a directory");

  // Shapes outside what `run` accepts are refused where they are written.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "1,129,1,2,256,64,bf16\n";
  expect_refused("bench --suite " + suite.string(), "line 2 heads = 129: is outside [1, 128]");
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "1,16,4,2,256;3,64,bf16\n";
  expect_refused("bench --suite " + suite.string(), "line 2 kv_len = 3: is shorter than q_len 4");
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "1,128,1,1048576,1073741824,1,bf16\n";
  expect_refused("bench --suite " + suite.string(), "GiB of host memory");
  std::filesystem::remove(suite);

  // Where the results go is checked before the suite runs.
  expect_refused("bench --json /nonexistent-helixmla-dir/r.json", "--json");
  expect_refused("bench --plot " + std::filesystem::temp_directory_path().string(), "--plot");
}

// Its flags are checked before it looks for a GPU (CI has none).
TEST_F(Cli, TraceChecksItsFlagsBeforeWorking) {
  expect_refused("trace --backend cpu --steps 2", "--backend: trace times runs on the GPU");
  expect_refused("trace --backend bogus --steps 2", "unknown backend bogus");
  expect_refused("trace --contexts 1", "--contexts");
  expect_refused("trace --batch 0", "--batch");
  expect_refused("trace --steps 0", "--steps");
  expect_refused("trace --every 0", "--every");
  expect_refused("trace --kv-len 1,4096 --q-len 2", "--kv-len");
  expect_refused("trace --padding nan", "--padding: 'nan' is not a share in [0, 1]");
  expect_refused("trace --kv-len 1073741824 --q-len 1024 --steps 1048576", "--steps");
}

}  // namespace

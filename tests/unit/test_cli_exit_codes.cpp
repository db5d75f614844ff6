// The `helixmla` program's verdicts: exit 0 for success, 1 for a failed run,
// 2 for a bad flag value; run on the binary this build produced.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace {

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr together
};

const std::string& cli() {
  static const std::string path = std::string(HELIXMLA_BINARY_DIR) + "/helixmla";
  return path;
}

Outcome helixmla(const std::string& args) {
  Outcome outcome;
  FILE* pipe = popen((cli() + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return outcome;
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) outcome.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(cli())) GTEST_SKIP() << cli() << " is not built";
  }
};

// `run --backend cpu` keeps its tensors in host memory on any machine, so
// `explain` must describe the same shape (on a GPU build that claims sm90).
TEST_F(Cli, ExplainWithTheCpuBackendDescribesHostTensors) {
  const Outcome o = helixmla("explain --arch sm90 --backend cpu --heads 16 --kv-len 256 --batch 2 --json");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_TRUE(has(o.output, " host\"")) << o.output;
  EXPECT_FALSE(has(o.output, " device\"")) << o.output;
}

TEST_F(Cli, AnUnknownBackendIsABadFlagValue) {
  Outcome o = helixmla("explain --backend bogus --heads 16 --kv-len 256");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "unknown backend bogus; this build has cpu")) << o.output;

  // A profile's backends are the known names there; the built-in ones are not.
  o = helixmla("explain --profile trtllm --arch sm100 --backend cpu --heads 16 --kv-len 256");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "unknown backend cpu; profile trtllm has cute_dsl, flashinfer_trtllm_gen, fallback"))
      << o.output;

  o = helixmla("run --backend bogus --heads 16 --kv-len 256");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "unknown backend bogus")) << o.output;
}

// The peer exchange needs one GPU per rank: asked for without --devices it
// is a bad flag value on any machine, not a failure later.
TEST_F(Cli, PeerExchangeWithoutDevicesIsABadFlagValue) {
  Outcome o = helixmla("run --cp 2 --exchange peer --heads 16 --kv-len 64 --batch 1");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "--exchange: peer needs one GPU per rank")) << o.output;

  o = helixmla("run --cp 2 --exchange carrier-pigeon --heads 16 --kv-len 64 --batch 1");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "--exchange")) << o.output;
}

// Flags that would fail only after minutes of work, or deep inside it, are
// rejected first.
TEST_F(Cli, SweepAndTuneCheckTheirFlagsBeforeWorking) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "helixmla-not-a-folder";
  std::ofstream(file) << "x";
  Outcome o = helixmla("sweep --arch sm90 --out " + file.string());
  std::filesystem::remove(file);
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "--out")) << o.output;
  EXPECT_FALSE(has(o.output, "sweep:")) << "rejected before sweeping: " << o.output;

  for (const char* bad : {"--max-seconds 0", "--max-seconds nan", "--max-seconds -3"}) {
    o = helixmla(std::string("sweep --execute ") + bad);
    EXPECT_EQ(o.code, 2) << bad << ": " << o.output;
    EXPECT_TRUE(has(o.output, "--max-seconds")) << o.output;
  }
  for (const char* bad : {"--heads 0,1000", "--batches -1", "--page-sizes 0", "--q-lens 0"}) {
    o = helixmla(std::string("tune ") + bad);
    EXPECT_EQ(o.code, 2) << bad << ": " << o.output;
  }
}

// A batch that would not fit in host memory is a flag error naming the
// sizes, not a bad_alloc or the OOM killer after minutes.
TEST_F(Cli, BatchesBeyondHostMemoryAreBadFlagValues) {
  Outcome o = helixmla("explain --heads 128 --batch 100000 --kv-len 1000000");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "(11.6 GiB of page table)")) << o.output;
  o = helixmla("run --heads 128 --batch 4096 --kv-len 1000000");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "needs 4398.1 GiB")) << "the KV pool dominates: " << o.output;
  o = helixmla("run --heads 128 --batch 16 --q-len 16 --kv-len 16 --contexts 4 --context-len 1048576");
  EXPECT_EQ(o.code, 2) << "contexts' queries and outputs count too: " << o.output;
}

// Values a CLI parser would quietly change (a wrapped or saturated seed, a
// dropped empty list item) are flag errors naming the flag and the entry.
TEST_F(Cli, SeedsAndCommaListsAreReadExactly) {
  Outcome o = helixmla("explain --heads 16 --batch 2 --seed -1");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "--seed") && has(o.output, "'-1'")) << o.output;
  o = helixmla("explain --heads 16 --batch 2 --seed 18446744073709551616");
  EXPECT_EQ(o.code, 2) << "one past 2^64 - 1: " << o.output;
  o = helixmla("explain --heads 16 --batch 2 --seed 18446744073709551615 --json");
  EXPECT_EQ(o.code, 0) << o.output;
  // Every comma list of the program reads the same way.
  const std::pair<const char*, const char*> refused[] = {
      {"explain --heads 16 --batch 3 --kv-len 100,,200", "entry 1 of '100,,200' is empty"},
      {"explain --heads 16 --batch 3 --kv-len 100,200,", "entry 2 of '100,200,' is empty"},
      {"explain --heads 16 --batch 3 --kv-len 100,2x0", "entry 1 ('2x0') of '100,2x0' is not an integer"},
      {"explain --heads 16 --batch 3 --kv-len 100,0", "entry 1 ('0') of '100,0' is outside [1, 1073741824]"},
      {"explain --heads 16 --batch 3 --kv-len 100 --kv-len 200,,5", "entry 1 of '200,,5' is empty"},
      {"tune --heads 16,,32", "--heads: entry 1 of '16,,32' is empty"},
      {"tune --kv-dtypes bf16,int4", "entry 1 ('int4') of 'bf16,int4'"},
      {"sweep --arch sm90,", "--arch: entry 1 of 'sm90,' is empty"},
      {"bench --cases 1,,2", "--cases: entry 1 of '1,,2' is empty"},
      {"run --cp 2 --devices 0,-1", "--devices: entry 1 ('-1') of '0,-1' is outside"},
  };
  for (const auto& [args, message] : refused) {
    o = helixmla(args);
    EXPECT_TRUE(o.code == 2 && has(o.output, message)) << args << ": " << o.output;
  }
  o = helixmla("explain --heads 16 --batch 3 --kv-len 100,300,200 --json");
  EXPECT_EQ(o.code, 0) << o.output;
}

// `sweep --profile` skips phases outside the profile's scope; `explain` shows
// them as such instead of failing for want of a backend.
TEST_F(Cli, ExplainShowsPhasesOutsideTheProfileScopeWithoutFailing) {
  const std::string batch =
      "explain --profile trtllm --arch sm100 --cp 2 --q-len 2 --contexts 2 --heads 24 --kv-len 256 --batch 2";
  Outcome o = helixmla(batch);
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_TRUE(has(o.output, "phase context\nshape: context")) << o.output;
  EXPECT_TRUE(has(o.output, "outside the profile's scope")) << o.output;
  EXPECT_TRUE(has(o.output, "phase generation")) << o.output;

  o = helixmla(batch + " --json");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_TRUE(has(o.output, "\"outside_scope\": true")) << o.output;
  EXPECT_TRUE(has(o.output, "\"outside_scope\": false")) << o.output;
}

// With --stats the softmax statistics are checked too, not only the output.
TEST_F(Cli, RunChecksTheStatsItWasAskedFor) {
  Outcome o = helixmla("run --backend cpu --stats --heads 8 --kv-len 100 --batch 2 --contexts 1 --repeat 1 --json");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_TRUE(has(o.output, "\"stats_ok\":true")) << o.output;
  EXPECT_TRUE(has(o.output, "\"stats_max_m_err\":")) << o.output;
  EXPECT_TRUE(has(o.output, "\"stats_max_l_rel_err\":")) << o.output;

  o = helixmla("run --backend cpu --stats --heads 8 --kv-len 100 --batch 2 --repeat 1");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_TRUE(has(o.output, "stats_m_err")) << o.output;

  o = helixmla("run --backend cpu --heads 8 --kv-len 100 --batch 2 --repeat 1 --json");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_FALSE(has(o.output, "stats_ok")) << o.output;
}

TEST_F(Cli, BenchRejectsCasesTheSuiteLacksAndRepeatedIds) {
  Outcome o = helixmla("bench --cases 1,99");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "case 99 is not in the suite")) << o.output;

  const std::filesystem::path suite = std::filesystem::temp_directory_path() / "helixmla-duplicate-ids.csv";
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\n"
                       << "3,16,1,2,256,64,bf16,first\n"
                       << "4,16,1,2,256,64,bf16,other\n"
                       << "3,32,1,2,256,64,bf16,again\n";
  o = helixmla("bench --suite " + suite.string());
  std::filesystem::remove(suite);
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "line 4 case = 3: duplicate case id; first on line 2")) << o.output;

  // CRLF line ends read like LF ones; a bad cell names the file, line and column.
  std::ofstream(suite) << "case,heads,q_len,batch,kv_len,page_size,kv_dtype,note\r\n"
                       << "3,16,1,2,256,64,bf16\r\n"
                       << "4,16,1,2000000,256,64,bf16\r\n";
  o = helixmla("bench --suite " + suite.string());
  std::filesystem::remove(suite);
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_TRUE(has(o.output, suite.string() + " line 3 batch = 2000000: expected an integer from 1 to 1048576"))
      << o.output;
}

}  // namespace

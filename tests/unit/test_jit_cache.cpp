// The just-in-time kernel cache: entries survive intact, damaged or outdated
// entries are detected and rebuilt, concurrent writers never leave a broken
// entry; and NVRTC compiles the tensor-core kernel for sm_90a without a GPU.
#if defined(HELIXMLA_WITH_CUDA)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/jit_cache.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/tensorcore_jit.hpp"
#include "helixmla/error.hpp"

namespace helixmla::cuda {
namespace {

namespace fs = std::filesystem;

class JitCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("helixmla-jit-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<char> payload(std::size_t bytes, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<char> data(bytes);
    for (char& c : data) c = static_cast<char>(rng());
    return data;
  }

  // Flips one byte of the stored file at `offset_from_end` bytes before its end.
  void flip_byte(const fs::path& path, std::size_t offset_from_end) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(0, std::ios::end);
    const auto size = static_cast<std::size_t>(f.tellg());
    ASSERT_GT(size, offset_from_end);
    f.seekg(static_cast<std::streamoff>(size - offset_from_end));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(size - offset_from_end));
    f.write(&c, 1);
  }

  fs::path dir_;
};

TEST_F(JitCacheTest, StoresAndLoadsExactly) {
  JitCache cache(dir_);
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load("variant_a", "key-1", &why));
  EXPECT_EQ(why, JitLookup::missing);

  const std::vector<char> data = payload(10000, 1);
  cache.store("variant_a", "key-1", data);
  const auto loaded = cache.load("variant_a", "key-1", &why);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(why, JitLookup::hit);
  EXPECT_EQ(*loaded, data);
  EXPECT_FALSE(cache.load("variant_b", "key-1"));
}

TEST_F(JitCacheTest, CorruptPayloadIsDetectedAndRebuilt) {
  JitCache cache(dir_);
  const std::vector<char> data = payload(4096, 2);
  cache.store("v", "key", data);
  flip_byte(cache.entry_path("v"), 100);
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load("v", "key", &why));
  EXPECT_EQ(why, JitLookup::corrupt);

  cache.store("v", "key", data);
  const auto loaded = cache.load("v", "key", &why);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(*loaded, data);
}

TEST_F(JitCacheTest, TruncatedAndForeignFilesAreCorrupt) {
  JitCache cache(dir_);
  cache.store("v", "key", payload(2048, 3));
  fs::resize_file(cache.entry_path("v"), fs::file_size(cache.entry_path("v")) - 1);
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load("v", "key", &why));
  EXPECT_EQ(why, JitLookup::corrupt);

  std::ofstream(cache.entry_path("w"), std::ios::binary) << "not a cache entry at all";
  EXPECT_FALSE(cache.load("w", "key", &why));
  EXPECT_EQ(why, JitLookup::corrupt);
}

// Something other than a regular file at an entry's path is a miss the
// next store replaces where it can: a FIFO must not block the load (its open
// waits for a writer), a directory must not throw out of the read.
TEST_F(JitCacheTest, NonRegularEntriesAreCorruptAndNeverBlock) {
  JitCache cache(dir_);
  fs::create_directories(dir_);
  const std::vector<char> data = payload(3000, 5);

  fs::create_directories(cache.entry_path("d") / "inside");
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load("d", "key", &why));
  EXPECT_EQ(why, JitLookup::corrupt);

  const fs::path fifo = cache.entry_path("f");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto load = std::async(std::launch::async, [&] {
    JitLookup kind = JitLookup::hit;
    const bool loaded = cache.load("f", "key", &kind).has_value();
    return std::make_pair(loaded, kind);
  });
  if (load.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Let the blocked open return so that the test can end.
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
    load.wait();
    FAIL() << "loading a FIFO entry blocked";
  }
  EXPECT_EQ(load.get(), std::make_pair(false, JitLookup::corrupt));
  cache.store("f", "key", data);
  const auto loaded = cache.load("f", "key", &why);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(*loaded, data);
}

// A header whose sizes sum, wrapping around 2^64, to the file's true size:
// the key must not be read beyond the file.
TEST_F(JitCacheTest, HeaderSizesThatWrapAreCorrupt) {
  JitCache cache(dir_);
  const std::string key = "source=0123;arch=sm_90a";
  const std::vector<char> data = payload(777, 6);
  cache.store("v", key, data);
  // The entry header's layout: magic[8], format u32, key_bytes u32,
  // key_digest u64, payload_bytes u64, payload_checksum u64.
  constexpr std::uint32_t key_bytes = 0xffffffffu;
  const std::uint64_t payload_bytes = key.size() + data.size() - std::uint64_t{key_bytes};
  {
    std::fstream f(cache.entry_path("v"), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(12);
    f.write(reinterpret_cast<const char*>(&key_bytes), sizeof key_bytes);
    f.seekp(24);
    f.write(reinterpret_cast<const char*>(&payload_bytes), sizeof payload_bytes);
    ASSERT_TRUE(f.good());
  }
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load("v", key, &why));
  EXPECT_EQ(why, JitLookup::corrupt);
}

// A directory the process cannot create (here: a name over NAME_MAX; as
// well a parent it may not search) is a RuntimeFailure from store, which
// cached_cubin absorbs: the kernel is compiled in memory.
TEST_F(JitCacheTest, UnusableDirectoryCostsACompileNotTheRun) {
  const JitCache cache(dir_ / std::string(300, 'd'));
  EXPECT_THROW(cache.store("v", "key", payload(64, 7)), RuntimeFailure);

  NvrtcProgram program;
  program.name = "tiny.cu";
  program.source = "extern \"C\" __global__ void tiny(int* out) { out[threadIdx.x] = 7; }";
  program.arch = "sm_90a";
  bool compiled = false;
  const std::vector<char> cubin = cached_cubin(program, "tiny", cache, &compiled);
  EXPECT_TRUE(compiled);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::string(cubin.data() + 1, 3), "ELF");
}

TEST_F(JitCacheTest, StaleKeyIsDetected) {
  JitCache cache(dir_);
  cache.store("v", "source=aaaa;nvrtc=13.0", payload(512, 4));
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load("v", "source=bbbb;nvrtc=13.0", &why));
  EXPECT_EQ(why, JitLookup::stale);
}

TEST_F(JitCacheTest, ConcurrentThreadWritersLeaveOneValidEntry) {
  JitCache cache(dir_);
  std::vector<std::vector<char>> payloads;
  for (unsigned i = 0; i < 6; ++i) payloads.push_back(payload(20000 + 1000 * i, 10 + i));
  std::vector<std::thread> writers;
  for (unsigned i = 0; i < payloads.size(); ++i) {
    writers.emplace_back([&, i] {
      for (int n = 0; n < 40; ++n) cache.store("shared", "key", payloads[i]);
    });
  }
  std::vector<std::thread> readers;
  std::atomic<int> bad_reads{0};
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      for (int n = 0; n < 200; ++n) {
        JitLookup why = JitLookup::hit;
        const auto got = cache.load("shared", "key", &why);
        if (!got && why != JitLookup::missing) ++bad_reads;
        if (got && std::find(payloads.begin(), payloads.end(), *got) == payloads.end()) ++bad_reads;
      }
    });
  }
  for (auto& t : writers) t.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad_reads.load(), 0);
  const auto loaded = cache.load("shared", "key");
  ASSERT_TRUE(loaded);
  EXPECT_NE(std::find(payloads.begin(), payloads.end(), *loaded), payloads.end());
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
        << "leftover temporary " << entry.path();
  }
}

// A writer killed before its rename leaves its temporary; a later store
// removes those old enough to belong to no live writer, and leaves a fresh
// one (a writer at work) and other files alone.
TEST_F(JitCacheTest, StoreRemovesAbandonedTemporaries) {
  JitCache cache(dir_);
  fs::create_directories(dir_);
  const auto write_file = [&](const std::string& name, unsigned seed) {
    const std::vector<char> bytes = payload(1500, seed);
    std::ofstream(dir_ / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return dir_ / name;
  };
  const fs::path abandoned = write_file("other.hjit.tmp.4242.00000000deadbeef.0", 30);
  const fs::path in_progress = write_file("v.hjit.tmp.4243.00000000deadbeef.1", 31);
  const fs::path foreign = write_file("notes.tmp.txt", 32);
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(abandoned, two_hours_ago);
  fs::last_write_time(foreign, two_hours_ago);

  const std::vector<char> data = payload(2500, 33);
  cache.store("v", "key", data);
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(fs::exists(in_progress));
  EXPECT_TRUE(fs::exists(foreign));
  const auto loaded = cache.load("v", "key");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(*loaded, data);
}

TEST_F(JitCacheTest, ConcurrentProcessWritersLeaveOneValidEntry) {
  std::vector<std::vector<char>> payloads;
  for (unsigned i = 0; i < 4; ++i) payloads.push_back(payload(50000 + 7 * i, 20 + i));
  std::vector<pid_t> children;
  for (unsigned i = 0; i < payloads.size(); ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        JitCache cache(dir_);
        for (int n = 0; n < 30; ++n) cache.store("shared", "key", payloads[i]);
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto loaded = JitCache(dir_).load("shared", "key");
  ASSERT_TRUE(loaded);
  EXPECT_NE(std::find(payloads.begin(), payloads.end(), *loaded), payloads.end());
}

TEST_F(JitCacheTest, DirectoryFollowsOverrideThenEnvironment) {
  const char* saved = std::getenv("HELIXMLA_JIT_CACHE");
  const std::string saved_value = saved ? saved : "";
  ::setenv("HELIXMLA_JIT_CACHE", dir_.c_str(), 1);
  EXPECT_EQ(JitCache::default_directory(), dir_);
  set_jit_cache_directory(dir_ / "override");
  EXPECT_EQ(JitCache::default_directory(), dir_ / "override");
  set_jit_cache_directory({});
  EXPECT_EQ(JitCache::default_directory(), dir_);
  if (saved) {
    ::setenv("HELIXMLA_JIT_CACHE", saved_value.c_str(), 1);
  } else {
    ::unsetenv("HELIXMLA_JIT_CACHE");
  }
}

// Sets an environment variable for one test and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (saved_) {
      ::setenv(name_, saved_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// Without $HOME the cache goes to a folder of the user's own (users sharing
// one, only its creator could write it), and a $TMPDIR that is no directory
// does not throw: a cache location never fails the run.
TEST_F(JitCacheTest, DirectoryWithoutHomeIsPerUserAndNeverThrows) {
  const ScopedEnv cache_env("HELIXMLA_JIT_CACHE", nullptr);
  const ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  const ScopedEnv home("HOME", nullptr);
  const std::string per_user = "helixmla-jit-" + std::to_string(::getuid());
  {
    const ScopedEnv tmpdir("TMPDIR", dir_.c_str());
    fs::create_directories(dir_);
    EXPECT_EQ(JitCache::default_directory(), dir_ / per_user);
  }
  const ScopedEnv tmpdir("TMPDIR", (dir_ / "absent").c_str());
  fs::path chosen;
  EXPECT_NO_THROW(chosen = JitCache::default_directory());
  EXPECT_EQ(chosen.filename(), per_user);
}

// NVRTC needs no GPU: the kernel text embedded in the library compiles for
// sm_90a here, and the second request is served from the disk cache.
TEST_F(JitCacheTest, TensorcoreKernelCompilesForSm90aAndIsCached) {
  const TensorcoreVariant variant{64, 48, DType::bf16, DType::fp8_e4m3, TensorcoreEngine::wgmma};
  ASSERT_FALSE(variant.precompiled());
  const NvrtcProgram program = tensorcore_jit_program(variant, "sm_90a");
  JitCache cache(dir_);
  bool compiled = false;
  const std::vector<char> cubin = cached_cubin(program, variant.name(), cache, &compiled);
  EXPECT_TRUE(compiled);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::string(cubin.data() + 1, 3), "ELF");

  EXPECT_EQ(cached_cubin(program, variant.name(), cache, &compiled), cubin);
  EXPECT_FALSE(compiled);

  // Another compiler option makes the stored entry stale: rebuilt, not reused.
  NvrtcProgram other = program;
  other.options.push_back("-DHELIXMLA_TEST_STALE=1");
  JitLookup why = JitLookup::hit;
  EXPECT_FALSE(cache.load(variant.name(), nvrtc_cache_key(other), &why));
  EXPECT_EQ(why, JitLookup::stale);

  flip_byte(cache.entry_path(variant.name()), 10);
  EXPECT_EQ(cached_cubin(program, variant.name(), cache, &compiled), cubin);
  EXPECT_TRUE(compiled);
}

// Every template path of the kernel text compiles under NVRTC (engines, fp16,
// fp8 widening, the smallest page, the two-block build), not only the one
// the cache test uses.
TEST(NvrtcCompiler, TensorcoreVariantsCompile) {
  constexpr TensorcoreEngine mma_sync = TensorcoreEngine::mma_sync;
  const TensorcoreVariant variants[] = {{16, 1, DType::fp16, DType::fp8_e4m3, mma_sync},
                                        {32, 96, DType::fp16, DType::fp16, mma_sync},
                                        {32, 5, DType::bf16, DType::fp8_e4m3, mma_sync, true},
                                        {32, 12, DType::fp16, DType::fp8_e4m3, mma_sync, true},
                                        {64, 3, DType::bf16, DType::bf16, mma_sync},
                                        {64, 7, DType::fp16, DType::fp16, TensorcoreEngine::wgmma}};
  for (const TensorcoreVariant& v : variants) {
    const std::vector<char> cubin = nvrtc_compile_cubin(tensorcore_jit_program(v, "sm_90a"));
    EXPECT_GT(cubin.size(), 1000u) << v.name();
  }
}

TEST(NvrtcCompiler, ReportsCompileErrorsWithTheLog) {
  NvrtcProgram program;
  program.name = "broken.cu";
  program.source = "__global__ void k() { this is not cuda; }";
  program.arch = "sm_90a";
  try {
    nvrtc_compile_cubin(program);
    FAIL() << "a broken program compiled";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("broken.cu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace helixmla::cuda

#endif  // HELIXMLA_WITH_CUDA

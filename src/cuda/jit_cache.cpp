#include "cuda/jit_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include "helixmla/error.hpp"

namespace helixmla::cuda {

namespace {

constexpr char kMagic[8] = {'H', 'M', 'L', 'A', 'J', 'I', 'T', '\x01'};
constexpr std::uint32_t kFormatVersion = 1;

// Fixed-size part of an entry; the key text and then the payload follow it.
struct EntryHeader {
  char magic[8];
  std::uint32_t format_version;
  std::uint32_t key_bytes;
  std::uint64_t key_digest;
  std::uint64_t payload_bytes;
  std::uint64_t payload_checksum;
};
static_assert(sizeof(EntryHeader) == 40);

std::mutex& override_mutex() {
  static std::mutex m;
  return m;
}
std::filesystem::path& directory_override() {
  static std::filesystem::path dir;
  return dir;
}

// Entry names become file names: keep them to a safe alphabet.
std::string file_name_of(std::string_view entry_name) {
  std::string name;
  for (char c : entry_name) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.';
    name += safe ? c : '_';
  }
  return name + ".hjit";
}

// Between an entry's file name and a writer's own suffix.
constexpr std::string_view kTemporaryInfix = ".tmp.";

// A writer killed between creating its temporary and renaming it leaves the
// temporary behind, and no later store would reuse its name. Writing one
// takes milliseconds, so one this old belongs to no live writer, on any host
// sharing the folder.
constexpr auto kAbandonedTemporaryAge = std::chrono::hours(1);

void remove_abandoned_temporaries(const std::filesystem::path& directory) {
  const std::string marker = std::string(".hjit") + std::string(kTemporaryInfix);
  const auto now = std::filesystem::file_time_type::clock::now();
  std::error_code ec;
  std::filesystem::directory_iterator it(directory, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().find(marker) == std::string::npos) continue;
    std::error_code entry_ec;
    if (!it->is_regular_file(entry_ec)) continue;
    const auto written = it->last_write_time(entry_ec);
    if (!entry_ec && now - written > kAbandonedTemporaryAge) std::filesystem::remove(it->path(), entry_ec);
  }
}

// Closes the descriptor on every way out of a load.
struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

// False on a short read or an error: the entry cannot be what its size said.
bool read_exactly(int fd, void* out, std::size_t bytes) {
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::read(fd, cursor, bytes);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    cursor += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(std::uint64_t value) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) text[static_cast<std::size_t>(i)] = digits[value & 15];
  return text;
}

JitCache::JitCache(std::filesystem::path directory) : directory_(std::move(directory)) {}

std::filesystem::path JitCache::default_directory() {
  {
    std::lock_guard<std::mutex> lock(override_mutex());
    if (!directory_override().empty()) return directory_override();
  }
  if (const char* dir = std::getenv("HELIXMLA_JIT_CACHE"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "helixmla" / "jit";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "helixmla" / "jit";
  }
  // No home (a service, a container's anonymous user): a folder of this
  // user's own under the temporary directory, so that users do not share
  // one that only its creator can write. The error_code form: a $TMPDIR
  // that is not a directory must not fail the run for want of a cache.
  std::error_code ec;
  std::filesystem::path temp = std::filesystem::temp_directory_path(ec);
  if (ec) temp = "/tmp";
  return temp / ("helixmla-jit-" + std::to_string(::getuid()));
}

void set_jit_cache_directory(const std::filesystem::path& directory) {
  std::lock_guard<std::mutex> lock(override_mutex());
  directory_override() = directory;
}

std::filesystem::path JitCache::entry_path(std::string_view entry_name) const {
  return directory_ / file_name_of(entry_name);
}

std::optional<std::vector<char>> JitCache::load(std::string_view entry_name, std::string_view key,
                                                JitLookup* why) const {
  const auto miss = [why](JitLookup kind) -> std::optional<std::vector<char>> {
    if (why) *why = kind;
    return std::nullopt;
  };
  // O_NONBLOCK: a FIFO at the entry's path would block the open until a
  // writer came. Only a regular file is read at all: a directory fails the
  // read, a device may never end.
  const OpenFile file{::open(entry_path(entry_name).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) return miss(JitLookup::missing);
  struct stat info {};
  if (::fstat(file.fd, &info) != 0 || !S_ISREG(info.st_mode)) return miss(JitLookup::corrupt);
  const auto file_bytes = static_cast<std::uint64_t>(info.st_size);
  EntryHeader header{};
  if (file_bytes < sizeof header || !read_exactly(file.fd, &header, sizeof header)) {
    return miss(JitLookup::corrupt);
  }
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 ||
      header.format_version != kFormatVersion) {
    return miss(JitLookup::corrupt);
  }
  // By subtraction: the header's sizes may hold anything, and their sum
  // could wrap around to the file's size.
  const std::uint64_t body_bytes = file_bytes - sizeof header;
  if (header.key_bytes > body_bytes || header.payload_bytes != body_bytes - header.key_bytes) {
    return miss(JitLookup::corrupt);
  }
  std::vector<char> body(body_bytes);
  if (!read_exactly(file.fd, body.data(), body.size())) return miss(JitLookup::corrupt);
  const std::string_view stored_key(body.data(), header.key_bytes);
  if (header.key_digest != fnv1a64(stored_key)) return miss(JitLookup::corrupt);
  if (stored_key != key) return miss(JitLookup::stale);
  const std::string_view payload_view(body.data() + header.key_bytes, header.payload_bytes);
  if (header.payload_checksum != fnv1a64(payload_view)) return miss(JitLookup::corrupt);
  if (why) *why = JitLookup::hit;
  body.erase(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(header.key_bytes));
  return body;
}

void JitCache::store(std::string_view entry_name, std::string_view key,
                     std::span<const char> payload) const {
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  // The error_code form: a path the process cannot search or name (EACCES,
  // ENAMETOOLONG) must stay a RuntimeFailure, which callers treat as a
  // cache they cannot use.
  std::error_code status_ec;
  if (ec && !std::filesystem::is_directory(directory_, status_ec)) {
    throw RuntimeFailure("cannot create the JIT cache directory " + directory_.string() + ": " +
                         ec.message());
  }
  EntryHeader header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.format_version = kFormatVersion;
  header.key_bytes = static_cast<std::uint32_t>(key.size());
  header.key_digest = fnv1a64(key);
  header.payload_bytes = payload.size();
  header.payload_checksum = fnv1a64(std::string_view(payload.data(), payload.size()));

  // A name no other writer can pick: process id, thread and a counter.
  static std::atomic<std::uint64_t> counter{0};
  const std::filesystem::path final_path = entry_path(entry_name);
  std::filesystem::path temp_path = final_path;
  temp_path += std::string(kTemporaryInfix) + std::to_string(::getpid()) + "." +
               hex64(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "." +
               std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&header), sizeof header);
    out.write(key.data(), static_cast<std::streamsize>(key.size()));
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(temp_path, ec);
      throw RuntimeFailure("cannot write the JIT cache entry " + temp_path.string());
    }
  }
  std::filesystem::rename(temp_path, final_path, ec);
  if (ec) {
    const std::string reason = ec.message();
    std::filesystem::remove(temp_path, ec);
    throw RuntimeFailure("cannot publish the JIT cache entry " + final_path.string() + ": " + reason);
  }
  remove_abandoned_temporaries(directory_);
}

}  // namespace helixmla::cuda

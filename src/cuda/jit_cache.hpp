// On-disk cache of just-in-time compiled kernels (cubins), so a page size
// compiled once is never compiled again by any later process.
//
// Location, first match wins: set_jit_cache_directory(), $HELIXMLA_JIT_CACHE,
// $XDG_CACHE_HOME/helixmla/jit, ~/.cache/helixmla/jit, and with no $HOME
// helixmla-jit-<uid> in the temporary directory. A location that cannot be
// created or written costs a compile per process, not the run.
//
// One file per entry name (the kernel variant and its architecture). The file
// starts with a header that carries the full key text (source-text hash,
// compile options, architecture, NVRTC version) and a checksum of the
// payload. A load whose key differs (stale: the kernel source or the compiler
// changed), whose checksum, length or magic is wrong, or that finds no
// regular file (corrupt) is a miss, so the caller compiles again and the
// store replaces the entry. Stores write a private temporary file and rename
// it over the entry: rename is atomic, so concurrent writers (threads or
// processes) leave one complete entry, never a mixture; a store removes
// temporaries over an hour old, which writers killed mid-write left.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace helixmla::cuda {

// 64-bit FNV-1a; used for key digests and payload checksums.
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = 0xcbf29ce484222325ull);
std::string hex64(std::uint64_t value);

enum class JitLookup : std::uint8_t { hit, missing, stale, corrupt };

class JitCache {
 public:
  explicit JitCache(std::filesystem::path directory);

  // The directory the process uses by default (see the file comment).
  static std::filesystem::path default_directory();

  const std::filesystem::path& directory() const { return directory_; }
  std::filesystem::path entry_path(std::string_view entry_name) const;

  // The payload when the entry exists, is intact and was stored under `key`;
  // otherwise nullopt, and `*why` (when given) says which miss it was.
  std::optional<std::vector<char>> load(std::string_view entry_name, std::string_view key,
                                        JitLookup* why = nullptr) const;
  // Atomically replaces the entry. Throws RuntimeFailure when the directory
  // cannot be created or written.
  void store(std::string_view entry_name, std::string_view key,
             std::span<const char> payload) const;

 private:
  std::filesystem::path directory_;
};

// Overrides the default directory for this process (empty: back to the
// environment variables).
void set_jit_cache_directory(const std::filesystem::path& directory);

}  // namespace helixmla::cuda

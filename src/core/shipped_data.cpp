#include "core/shipped_data.hpp"

#include <dlfcn.h>

#include <filesystem>

namespace helixmla {

namespace {

// <prefix>/share/helixmla for the prefix the library was loaded from.
std::string beside_loaded_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&shipped_data_roots), &info) == 0 || !info.dli_fname) return {};
  const std::filesystem::path library = std::filesystem::absolute(info.dli_fname);
  return (library.parent_path().parent_path() / "share" / "helixmla").string();
}

}  // namespace

std::vector<std::string> shipped_data_roots() {
  std::vector<std::string> roots;
  for (const std::string& root : {std::string(HELIXMLA_SOURCE_DIR), beside_loaded_library(),
                                  std::string(HELIXMLA_DATA_DIR)}) {
    std::error_code ignored;
    if (!root.empty() && std::filesystem::is_directory(root, ignored)) roots.push_back(root);
  }
  return roots;
}

}  // namespace helixmla

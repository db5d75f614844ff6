// Where the files helixmla ships (profiles/, data/perf/) can be found: the
// source tree it was built from, the install tree beside the loaded library
// (so an install moved or made with `cmake --install --prefix` still finds
// them), and the install prefix configured at build time.
#pragma once

#include <string>
#include <vector>

namespace helixmla {

// Existing folders, most specific first; each may hold profiles/ and data/.
std::vector<std::string> shipped_data_roots();

}  // namespace helixmla

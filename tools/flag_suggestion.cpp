#include "flag_suggestion.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace helixmla::tools {

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string nearest_flags(const CLI::App& command, const std::string& unknown) {
  if (unknown.rfind("--", 0) != 0) return {};
  const std::string name = unknown.substr(2, unknown.find('=') - 2);
  if (name.empty()) return {};
  // Two edits catch a dropped, doubled or swapped letter or dash; a shorter
  // name than that would match nearly any flag.
  const std::size_t reach = name.size() < 4 ? 1 : 2;
  std::vector<std::string> best;
  std::size_t best_distance = reach + 1;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& flag : option->get_lnames()) {
      if (flag == name) return {};
      // A prefix ("--page" for "--page-size") is as good as one edit.
      const std::size_t distance = flag.rfind(name, 0) == 0 ? 1 : edit_distance(name, flag);
      if (distance < best_distance) {
        best_distance = distance;
        best.clear();
      }
      if (distance == best_distance) best.push_back("--" + flag);
    }
  }
  std::string text;
  for (std::size_t i = 0; i < best.size(); ++i) text += (i == 0 ? "" : i + 1 == best.size() ? " or " : ", ") + best[i];
  return text;
}

}  // namespace helixmla::tools

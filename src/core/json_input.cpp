#include "core/json_input.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "helixmla/error.hpp"

namespace helixmla {

namespace {

// The deepest nesting of arrays and objects in `text`, counted in one pass
// (strings skipped) and cut off just past `limit`. nlohmann's parser
// callback could enforce the limit too, but it makes parsing quadratic in
// the document's size.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

nlohmann::json parse_json_input(std::string_view text, const std::string& field, const std::string& origin) {
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    throw InvalidArgument(field, -1, origin, "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number out of range
    throw InvalidArgument(field, -1, origin, std::string("not valid JSON: ") + e.what());
  }
}

std::string brief_json(const nlohmann::json& value) {
  constexpr std::size_t kLimit = 80;
  if (value.is_structured() && value.size() > kLimit) {
    return std::string(value.type_name()) + " of " + std::to_string(value.size()) + " elements";
  }
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kLimit) {
    std::size_t cut = kLimit - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;  // not inside a UTF-8 character
    text = text.substr(0, cut) + "...";
  }
  return text;
}

std::string read_input_file(const std::string& path, const std::string& field, const std::string& what) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw InvalidArgument(field, -1, path, "is a directory, not a " + what + " file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(field, -1, path, "cannot be opened for reading");
  // Read in pieces up to the limit, not by size: a pipe or a device such as
  // /dev/zero has none, and would otherwise be read until memory runs out.
  std::string text;
  char piece[1 << 16];
  while (in.read(piece, sizeof(piece)) || in.gcount() > 0) {
    text.append(piece, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxInputFileBytes) {
      throw InvalidArgument(field, -1, path,
                            "is larger than " + std::to_string(kMaxInputFileBytes >> 20) + " MiB, not a " + what + " file");
    }
  }
  return text;
}

}  // namespace helixmla

#include "core/json_input.hpp"

#include <filesystem>
#include <fstream>
#include <unordered_set>
#include <vector>

#include "helixmla/error.hpp"

namespace helixmla {

namespace {

// One SAX pass ahead of the parse that builds the document: nlohmann's
// parser keeps the last of an object's repeated keys without a word, and its
// parser callback, which could count the depth, makes parsing quadratic in
// the document's size. Each open object's keys are kept until it closes.
class StructureCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  StructureCheck(const std::string& field, const std::string& origin) : field_(field), origin_(origin) {}

  bool null() override { return element(); }
  bool boolean(bool) override { return element(); }
  bool number_integer(number_integer_t) override { return element(); }
  bool number_unsigned(number_unsigned_t) override { return element(); }
  bool number_float(number_float_t, const string_t&) override { return element(); }
  bool string(string_t&) override { return element(); }
  bool binary(binary_t&) override { return element(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& name) override {
    Level& object = open_.back();
    if (!object.keys.insert(name).second) {
      throw InvalidArgument(path() + "." + name, -1, origin_,
                            "appears more than once in its object (JSON readers differ on which one counts)");
    }
    object.key = name;
    return true;
  }

  // Left to the parse that builds the document, which throws it.
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override { return false; }

 private:
  struct Level {
    bool object = false;
    std::size_t elements = 0;  // of an array, to name the current one
    std::string key;           // of an object, the current one
    std::unordered_set<std::string> keys;
  };

  bool element() {
    if (!open_.empty() && !open_.back().object) ++open_.back().elements;
    return true;
  }

  bool open(bool object) {
    element();
    if (open_.size() == static_cast<std::size_t>(kMaxJsonDepth)) {
      throw InvalidArgument(field_, -1, origin_, "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    open_.emplace_back().object = object;
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  // "profile.backends[0].kernels": where the innermost open object sits.
  std::string path() const {
    std::string text = field_;
    for (std::size_t i = 0; i + 1 < open_.size(); ++i) {
      text += open_[i].object ? "." + open_[i].key : "[" + std::to_string(open_[i].elements - 1) + "]";
    }
    return text;
  }

  const std::string& field_;
  const std::string& origin_;
  std::vector<Level> open_;
};

}  // namespace

nlohmann::json parse_json_input(std::string_view text, const std::string& field, const std::string& origin) {
  try {
    StructureCheck check(field, origin);
    nlohmann::json::sax_parse(text, &check);
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

std::string input_file_refusal(const std::string& path) {
  std::error_code error;
  switch (std::filesystem::status(path, error).type()) {
    case std::filesystem::file_type::directory: return "is a directory";
    case std::filesystem::file_type::fifo: return "is a FIFO (named pipe)";
    case std::filesystem::file_type::socket: return "is a socket";
    default: return "";
  }
}

std::string read_input_file(const std::string& path, const std::string& field, const std::string& what) {
  if (const std::string refusal = input_file_refusal(path); !refusal.empty()) {
    throw InvalidArgument(field, -1, path, refusal + ", not a " + what + " file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(field, -1, path, "cannot be opened for reading");
  // Read in pieces up to the limit, not by size: a device such as /dev/zero
  // has none, and would otherwise be read until memory runs out.
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

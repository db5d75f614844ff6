#include "core/json_input.hpp"

#include "helixmla/error.hpp"

namespace helixmla {

nlohmann::json parse_json_input(std::string_view text, const std::string& field, const std::string& origin) {
  const auto limit_depth = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if (depth > kMaxJsonDepth &&
        (event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start)) {
      throw InvalidArgument(field, -1, origin, "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, limit_depth);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number out of range
    throw InvalidArgument(field, -1, origin, std::string("not valid JSON: ") + e.what());
  }
}

std::string brief_json(const nlohmann::json& value) {
  constexpr std::size_t kLimit = 80;
  if (value.is_structured() && value.size() > kLimit) return std::string(value.type_name()) + " of " + std::to_string(value.size()) + " elements";
  std::string text = value.dump();
  if (text.size() > kLimit) text = text.substr(0, kLimit - 3) + "...";
  return text;
}

}  // namespace helixmla

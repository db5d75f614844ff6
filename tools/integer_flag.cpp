#include "integer_flag.hpp"

#include <fmt/format.h>

#include <charconv>
#include <string>

namespace helixmla::tools {

std::string integer_complaint(const std::string& text, std::int64_t min, std::int64_t max) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || end != text.data() + text.size() ||
      (error != std::errc() && error != std::errc::result_out_of_range)) {
    return "is not an integer";
  }
  if (error == std::errc::result_out_of_range || value < min || value > max) {
    return fmt::format("is outside [{}, {}]", min, max);
  }
  return {};
}

CLI::Validator integer_in(std::int64_t min, std::int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) {
        const std::string complaint = integer_complaint(text, min, max);
        if (!complaint.empty()) return "'" + text + "' " + complaint;
        // CLI11 converts with base 0, which reads "010" as octal 8: it gets
        // the decimal value the check read.
        text = std::to_string(std::stoll(text));
        return std::string();
      },
      fmt::format("INT in [{} - {}]", min, max));
}

}  // namespace helixmla::tools

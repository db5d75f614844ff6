#include "integer_flag.hpp"

#include <fmt/format.h>

#include <charconv>
#include <string>

namespace helixmla::tools {

IntegerRead read_integer(const std::string& text, std::int64_t min, std::int64_t max) {
  IntegerRead read;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), read.value);
  if (text.empty() || end != text.data() + text.size() ||
      (error != std::errc() && error != std::errc::result_out_of_range)) {
    read.complaint = "is not an integer";
  } else if (error == std::errc::result_out_of_range || read.value < min || read.value > max) {
    read.complaint = fmt::format("is outside [{}, {}]", min, max);
  }
  return read;
}

CLI::Validator integer_in(std::int64_t min, std::int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) {
        const IntegerRead read = read_integer(text, min, max);
        if (!read.complaint.empty()) return "'" + text + "' " + read.complaint;
        // CLI11 converts with base 0, which reads "010" as octal 8: it gets
        // the decimal value read here.
        text = std::to_string(read.value);
        return std::string();
      },
      fmt::format("INT in [{} - {}]", min, max));
}

CLI::Validator non_empty() {
  return CLI::Validator([](const std::string& text) { return text.empty() ? "must not be empty" : std::string(); },
                        "");
}

}  // namespace helixmla::tools

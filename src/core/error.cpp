#include "helixmla/error.hpp"

#include <utility>

namespace helixmla {

namespace {
std::string format_message(const std::string& field, std::int64_t index, const std::string& value,
                           const std::string& rule) {
  std::string where = field;
  if (index >= 0) where += "[" + std::to_string(index) + "]";
  return "invalid " + where + " = " + value + ": " + rule;
}
}  // namespace

InvalidArgument::InvalidArgument(std::string field, std::int64_t index, std::string value,
                                 std::string rule)
    : Error(format_message(field, index, value, rule)),
      field_(std::move(field)),
      index_(index),
      value_(std::move(value)),
      rule_(std::move(rule)) {}

}  // namespace helixmla

#include "helixmla/error.hpp"

#include <fmt/format.h>

#include <utility>

namespace helixmla {

namespace {
std::string format_message(const std::string& field, std::int64_t index, const std::string& value,
                           const std::string& rule) {
  return index >= 0 ? fmt::format("invalid {}[{}] = {}: {}", field, index, value, rule)
                    : fmt::format("invalid {} = {}: {}", field, value, rule);
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

#include "comma_list.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <utility>

#include "integer_flag.hpp"

namespace helixmla::tools {

namespace {

std::string item_at(const std::string& flag_text, std::size_t index, const std::string& item) {
  return fmt::format("entry {} ('{}') of '{}'", index, item, flag_text);
}

// Runs `read` on every item of every text given to the option; the result
// replaces the default only once the whole option has been read.
template <typename T, typename Read>
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<T>& values, const std::string& description,
                      Repeats repeats, Read read) {
  CLI::Option* option = app.add_option_function<std::vector<std::string>>(
      name,
      [&values, name, repeats, read](const std::vector<std::string>& texts) {
        std::vector<T> parsed;
        for (const std::string& text : texts) {
          const std::vector<std::string> items = split_items(text);
          for (std::size_t i = 0; i < items.size(); ++i) {
            if (items[i].empty()) throw CLI::ValidationError(name, fmt::format("entry {} of '{}' is empty", i, text));
            T value = read(text, i, items[i]);
            if (repeats == Repeats::refused && std::find(parsed.begin(), parsed.end(), value) != parsed.end()) {
              throw CLI::ValidationError(name, item_at(text, i, items[i]) + " repeats an earlier entry");
            }
            parsed.push_back(std::move(value));
          }
        }
        values = std::move(parsed);
      },
      description);
  if (!values.empty()) option->default_str(fmt::format("{}", fmt::join(values, ",")));
  return option;
}

}  // namespace

std::vector<std::string> split_items(const std::string& text, char separator) {
  std::vector<std::string> items;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find(separator, begin);
    items.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return items;
    begin = end + 1;
  }
}

CLI::Option* add_int_list(CLI::App& app, const std::string& name, std::vector<int>& values, std::int64_t min,
                          std::int64_t max, const std::string& description, Repeats repeats) {
  auto read = [name, min, max](const std::string& text, std::size_t index, const std::string& item) {
    const IntegerRead read = read_integer(item, min, max);
    if (!read.complaint.empty()) throw CLI::ValidationError(name, item_at(text, index, item) + " " + read.complaint);
    return static_cast<int>(read.value);
  };
  return add_list(app, name, values, description, repeats, read)
      ->type_name(fmt::format("INT[,INT...] in [{} - {}]", min, max));
}

CLI::Option* add_name_list(CLI::App& app, const std::string& name, std::vector<std::string>& values,
                           std::function<std::string(const std::string&)> check,
                           std::function<std::string(const std::string&)> canonical, const std::string& description) {
  auto read = [name, check, canonical](const std::string& text, std::size_t index, const std::string& item) {
    if (const std::string why = check(item); !why.empty()) {
      throw CLI::ValidationError(name, item_at(text, index, item) + ": " + why);
    }
    return canonical(item);
  };
  return add_list(app, name, values, description, Repeats::refused, read)->type_name("TEXT[,TEXT...]");
}

}  // namespace helixmla::tools

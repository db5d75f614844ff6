// Comma-separated list flags read strictly. CLI11's delimiter(',') drops
// empty items ("100,,200" reads as two values) and names neither the item
// nor its place when one is bad; these options read their own text, and
// every error names the flag, the item's index within the text, and the text.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace helixmla::tools {

// The items of one text separated by `separator`, empty ones included.
std::vector<std::string> split_items(const std::string& text, char separator = ',');

// Whether a list may name an item twice: only where repeating means something
// (--kv-len's lengths cycle over the requests); elsewhere a repeat is a typo
// that would run the same work twice.
enum class Repeats { allowed, refused };

// Integers in [min, max]; the option may be given several times (the items add up).
CLI::Option* add_int_list(CLI::App& app, const std::string& name, std::vector<int>& values, std::int64_t min,
                          std::int64_t max, const std::string& description, Repeats repeats = Repeats::refused);

// Names accepted by `check`, which returns an empty string or the reason an
// item is refused, kept as `canonical` spells them; none twice in any
// spelling ("sm90,90" names one architecture twice).
CLI::Option* add_name_list(CLI::App& app, const std::string& name, std::vector<std::string>& values,
                           std::function<std::string(const std::string&)> check,
                           std::function<std::string(const std::string&)> canonical, const std::string& description);

}  // namespace helixmla::tools

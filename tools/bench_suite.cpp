#include "bench_suite.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string_view>

#include "comma_list.hpp"
#include "core/json_input.hpp"
#include "helixmla/error.hpp"
#include "helixmla/validate.hpp"
#include "integer_flag.hpp"
#include "problem_flags.hpp"

namespace helixmla::tools {

namespace {

constexpr const char* kColumns = "case,heads,q_len,batch,kv_len,page_size,kv_dtype[,note]";
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

// Names a cell as "<file> line N <column>" so an error points into the file.
std::string cell(const std::string& path, std::int64_t line, const char* column) {
  return fmt::format("{} line {} {}", path, line, column);
}

// Read as the flags read theirs: " 48" and "+1" are not integers.
std::int32_t parse_int(const std::string& text, const std::string& where, std::int64_t most = kMaxSuiteInteger) {
  const IntegerRead read = read_integer(text, 1, most);
  if (!read.complaint.empty()) throw InvalidArgument(where, -1, text, read.complaint);
  return static_cast<std::int32_t>(read.value);
}

}  // namespace

std::vector<BenchCase> load_suite(const std::string& path) {
  std::istringstream file(read_input_file(path, "--suite", "suite"));
  std::vector<BenchCase> cases;
  std::map<int, std::int64_t> line_of_id;
  std::string line;
  std::int64_t number = 0;
  while (std::getline(file, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written with CRLF line ends
    if (number == 1) {
      // Some editors start a UTF-8 file with a byte-order mark: invisible,
      // so the header behind it is taken for what it looks like.
      if (line.starts_with(kByteOrderMark)) line.erase(0, kByteOrderMark.size());
      // The header names the columns; a file without one would lose its first case.
      if (split_items(line).front() != "case") {
        throw InvalidArgument(fmt::format("{} line 1", path), -1, line, fmt::format("expected the header {}", kColumns));
      }
      continue;
    }
    if (line.empty()) continue;
    const auto f = split_items(line);
    if (f.size() < 7) {
      throw InvalidArgument(fmt::format("{} line {}", path, number), -1, line,
                            fmt::format("expected 7 or 8 comma-separated columns: {}", kColumns));
    }
    BenchCase c;
    c.id = parse_int(f[0], cell(path, number, "case"));
    if (const auto [first, added] = line_of_id.emplace(c.id, number); !added) {
      throw InvalidArgument(cell(path, number, "case"), -1, f[0],
                            fmt::format("duplicate case id; first on line {}", first->second));
    }
    c.heads = parse_int(f[1], cell(path, number, "heads"), kMaxHeads);
    c.q_len = parse_int(f[2], cell(path, number, "q_len"));
    // Bounded so a typo cannot make the loader build a list of 2^30 lengths.
    c.batch = parse_int(f[3], cell(path, number, "batch"), 1L << 20);
    // "var": the suite's deterministic spread of lengths; otherwise one
    // length, or several separated by ';' and cycled over the requests (a
    // mixed batch, as `run --kv-len` cycles its comma list).
    std::vector<std::int32_t> lengths;
    if (f[4] != "var") {
      for (const std::string& item : split_items(f[4], ';')) {
        lengths.push_back(parse_int(item, cell(path, number, "kv_len")));
        if (lengths.back() < c.q_len) {
          throw InvalidArgument(cell(path, number, "kv_len"), -1, item,
                                fmt::format("is shorter than q_len {}: new tokens are part of the KV", c.q_len));
        }
      }
      if (const std::string complaint = unused_lengths_complaint(lengths.size(), c.batch, "batch");
          !complaint.empty()) {
        throw InvalidArgument(cell(path, number, "kv_len"), -1, f[4], complaint);
      }
    }
    for (std::int32_t i = 0; i < c.batch; ++i) {
      c.kv_len.push_back(lengths.empty()
                             ? 1024 + static_cast<std::int32_t>((static_cast<std::int64_t>(i) * 7919) % 15361)
                             : lengths[static_cast<std::size_t>(i) % lengths.size()]);
    }
    if (lengths.empty()) {
      const std::int32_t shortest = *std::min_element(c.kv_len.begin(), c.kv_len.end());
      if (shortest < c.q_len) {
        throw InvalidArgument(cell(path, number, "kv_len"), -1, f[4],
                              fmt::format("its shortest length, {}, is shorter than q_len {}: new tokens are part "
                                          "of the KV",
                                          shortest, c.q_len));
      }
    }
    c.page_size = parse_int(f[5], cell(path, number, "page_size"));
    const auto dtype = parse_kv_dtype(f[6]);
    if (!dtype) throw InvalidArgument(cell(path, number, "kv_dtype"), -1, f[6], kv_dtype_complaint(f[6]));
    c.kv_dtype = *dtype;
    // The note is the rest of the line, commas and all.
    for (std::size_t i = 7; i < f.size(); ++i) c.note += (i > 7 ? "," : "") + f[i];
    if (const std::string complaint = host_footprint_complaint(batch_spec_of(c, 1)); !complaint.empty()) {
      throw InvalidArgument(fmt::format("{} line {}", path, number), -1, line, complaint);
    }
    cases.push_back(std::move(c));
  }
  if (cases.empty()) throw InvalidArgument("--suite", -1, path, "holds no cases");
  return cases;
}

testing::BatchSpec batch_spec_of(const BenchCase& c, std::uint64_t seed) {
  testing::BatchSpec spec;
  spec.heads = c.heads;
  spec.generations = c.batch;
  spec.q_len = c.q_len;
  spec.kv_len = c.kv_len;
  spec.page_size = c.page_size;
  spec.use_kv_dtype(c.kv_dtype);
  spec.seed = seed;
  spec.spare_pages = 0;
  return spec;
}

CaseCost cost_of(const BenchCase& c, const MlaDims& dims) {
  CaseCost cost;
  const double tokens = static_cast<double>(c.batch) * c.q_len;
  const double q_size = static_cast<double>(dtype_size(testing::default_q_dtype(c.kv_dtype)));
  for (std::int32_t len : c.kv_len) {
    cost.kv_bytes += static_cast<double>(len) * dims.head_dim() * static_cast<double>(dtype_size(c.kv_dtype));
    cost.flops += 2.0 * len * c.q_len * c.heads * (dims.head_dim() + dims.kv_lora_rank);
  }
  cost.bytes = cost.kv_bytes + tokens * c.heads * (dims.head_dim() + dims.kv_lora_rank) * q_size;
  return cost;
}

}  // namespace helixmla::tools

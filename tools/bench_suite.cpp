#include "bench_suite.hpp"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>

#include "helixmla/error.hpp"

namespace helixmla::tools {

namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  std::string field;
  while (std::getline(stream, field, ',')) fields.push_back(field);
  return fields;
}

std::int32_t parse_int(const std::string& text, const std::string& column, std::int64_t line) {
  try {
    std::size_t used = 0;
    const long value = std::stol(text, &used);
    if (used == text.size() && value > 0 && value <= (1L << 30)) return static_cast<std::int32_t>(value);
  } catch (const std::exception&) {
  }
  throw InvalidArgument(column, line, text, "expected a positive integer");
}

}  // namespace

std::vector<BenchCase> load_suite(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw InvalidArgument("--suite", -1, path, "cannot open the file");
  std::vector<BenchCase> cases;
  std::map<int, std::int64_t> line_of_id;
  std::string line;
  std::int64_t number = 0;
  while (std::getline(file, line)) {
    ++number;
    if (number == 1 || line.empty()) continue;  // header
    const auto f = split_csv(line);
    if (f.size() < 7) throw InvalidArgument("suite line", number, line, "expected 7 or 8 comma-separated columns");
    BenchCase c;
    c.id = parse_int(f[0], "case", number);
    if (const auto [first, added] = line_of_id.emplace(c.id, number); !added) {
      throw InvalidArgument("case", number, f[0], fmt::format("duplicate case id; first on line {}", first->second));
    }
    c.heads = parse_int(f[1], "heads", number);
    c.q_len = parse_int(f[2], "q_len", number);
    c.batch = parse_int(f[3], "batch", number);
    for (std::int32_t i = 0; i < c.batch; ++i) {
      // "var": the suite's deterministic spread of lengths.
      c.kv_len.push_back(f[4] == "var" ? 1024 + static_cast<std::int32_t>((static_cast<std::int64_t>(i) * 7919) % 15361)
                                       : parse_int(f[4], "kv_len", number));
    }
    c.page_size = parse_int(f[5], "page_size", number);
    const auto dtype = parse_dtype(f[6]);
    if (!dtype || *dtype == DType::fp32) throw InvalidArgument("kv_dtype", number, f[6], "expected bf16, fp16 or fp8");
    c.kv_dtype = *dtype;
    if (f.size() > 7) c.note = f[7];
    cases.push_back(std::move(c));
  }
  return cases;
}

testing::BatchSpec batch_spec_of(const BenchCase& c, std::uint64_t seed) {
  testing::BatchSpec spec;
  spec.heads = c.heads;
  spec.generations = c.batch;
  spec.q_len = c.q_len;
  spec.kv_len = c.kv_len;
  spec.page_size = c.page_size;
  spec.kv_dtype = c.kv_dtype;
  spec.q_dtype = testing::default_q_dtype(c.kv_dtype);
  spec.kv_scale = testing::default_kv_scale(c.kv_dtype);
  spec.seed = seed;
  spec.spare_pages = 0;
  return spec;
}

CaseCost cost_of(const BenchCase& c, const MlaDims& dims) {
  CaseCost cost;
  const double tokens = static_cast<double>(c.batch) * c.q_len;
  const double q_size = static_cast<double>(dtype_size(testing::default_q_dtype(c.kv_dtype)));
  for (std::int32_t len : c.kv_len) {
    cost.bytes += static_cast<double>(len) * dims.head_dim() * static_cast<double>(dtype_size(c.kv_dtype));
    cost.flops += 2.0 * len * c.q_len * c.heads * (dims.head_dim() + dims.kv_lora_rank);
  }
  cost.bytes += tokens * c.heads * (dims.head_dim() + dims.kv_lora_rank) * q_size;
  return cost;
}

}  // namespace helixmla::tools

// Benchmark suites (bench/mla-decode-v1.csv) and the cost model of DESIGN §7.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "synthetic_batch.hpp"

namespace helixmla::tools {

// The largest case id (and count, length or size) a suite's cells may hold.
inline constexpr std::int64_t kMaxSuiteInteger = std::int64_t{1} << 30;

struct BenchCase {
  int id = 0;
  std::int32_t heads = 0;
  std::int32_t q_len = 1;
  std::int32_t batch = 1;
  std::vector<std::int32_t> kv_len;  // one per request
  std::int32_t page_size = 64;
  DType kv_dtype = DType::bf16;
  std::string note;
};

// Throws InvalidArgument naming the line and column on malformed input or a
// repeated case id.
std::vector<BenchCase> load_suite(const std::string& path);
testing::BatchSpec batch_spec_of(const BenchCase& c, std::uint64_t seed);

struct CaseCost {
  double bytes = 0.0;     // KV read once + Q read + O written
  double kv_bytes = 0.0;  // KV read once
  double flops = 0.0;  // 2 * sum kv_len * q_len * H * (576 + 512)
};
CaseCost cost_of(const BenchCase& c, const MlaDims& dims = {});

}  // namespace helixmla::tools

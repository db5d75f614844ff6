// Measured times per backend, keyed by what the tuner varied (architecture,
// KV dtype, heads, q_len, page size, batch bucket). Written by `helixmla tune`,
// loaded by the selector.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "helixmla/backend.hpp"

namespace helixmla {

struct PerfKey {
  Arch arch = Arch::none;
  DType kv_dtype = DType::bf16;
  std::int32_t num_heads = 0;
  std::int32_t q_len = 0;
  std::int32_t page_size = 0;
  std::int32_t batch_bucket = 0;
  auto operator<=>(const PerfKey&) const = default;
  static PerfKey of(const PhaseShape& shape, Arch arch);
  std::string describe() const;
};

class PerfTable {
 public:
  // Median microseconds per backend name.
  using Times = std::map<std::string, double>;

  // Throws InvalidArgument for an empty backend name or a time that is not
  // positive and finite.
  void record(const PerfKey& key, const std::string& backend, double microseconds);
  const Times* find(const PerfKey& key) const;
  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }

  std::string to_json() const;
  // Throws InvalidArgument naming the JSON field on malformed input.
  // `origin` names the text in errors (a path; "text" when it has none).
  static PerfTable from_json(const std::string& text, const std::string& origin = "text");
  // `field` names where the path came from in errors (a flag or variable).
  static PerfTable load(const std::string& path, const std::string& field = "perf_table_path");
  void save(const std::string& path) const;

 private:
  std::map<PerfKey, Times> entries_;
};

}  // namespace helixmla

#include "helixmla/perf_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/json_input.hpp"
#include "helixmla/error.hpp"
#include "helixmla/validate.hpp"

namespace helixmla {

namespace {

using nlohmann::json;

constexpr int kVersion = 1;

const json& member(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) {
    throw InvalidArgument(where + "." + key, -1, "missing", "required field of a performance table");
  }
  return *it;
}

std::int32_t int_in(const json& object, const char* key, const std::string& where, std::int64_t lowest,
                    std::int64_t highest = 1 << 30) {
  const json& value = member(object, key, where);
  if (!value.is_number_integer() || value.get<std::int64_t>() < lowest || value.get<std::int64_t>() > highest) {
    throw InvalidArgument(where + "." + key, -1, brief_json(value),
                          fmt::format("must be an integer from {} to {}", lowest, highest));
  }
  return value.get<std::int32_t>();
}

// As profiles do: a misspelt field would otherwise be dropped in silence.
void only_fields(const json& object, const std::string& where, std::initializer_list<std::string_view> fields) {
  for (const auto& [name, value] : object.items()) {
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) {
      throw InvalidArgument(where + "." + name, -1, brief_json(value), "is not a field of a performance table");
    }
  }
}

std::string text_of(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  if (!value.is_string()) throw InvalidArgument(where + "." + key, -1, brief_json(value), "must be a string");
  return value.get<std::string>();
}

}  // namespace

PerfKey PerfKey::of(const PhaseShape& shape, Arch arch) {
  PerfKey key;
  key.arch = arch;
  key.kv_dtype = shape.kv_dtype;
  key.num_heads = shape.num_heads;
  key.q_len = shape.q_len;
  key.page_size = shape.page_size;
  key.batch_bucket = shape.batch_bucket;
  return key;
}

std::string PerfKey::describe() const {
  return fmt::format("{} kv={} H={} q_len={} page={} batch>={}", to_string(arch), to_string(kv_dtype),
                     num_heads, q_len, page_size, batch_bucket);
}

void PerfTable::record(const PerfKey& key, const std::string& backend, double microseconds) {
  if (backend.empty()) throw InvalidArgument("backend", -1, "\"\"", "must name a backend");
  // The selector compares times with <, so a NaN taken first would win every
  // comparison after it; to_json would also write it as null, which
  // from_json refuses.
  if (!(microseconds > 0.0) || !std::isfinite(microseconds)) {
    throw InvalidArgument("microseconds", -1, fmt::format("{}", microseconds),
                          fmt::format("the time of {} at {} must be a positive, finite number", backend,
                                      key.describe()));
  }
  entries_[key][backend] = microseconds;
}

const PerfTable::Times* PerfTable::find(const PerfKey& key) const {
  const auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

std::string PerfTable::to_json() const {
  json entries = json::array();
  for (const auto& [key, times] : entries_) {
    json entry;
    entry["arch"] = std::string(to_string(key.arch));
    entry["kv_dtype"] = std::string(to_string(key.kv_dtype));
    entry["heads"] = key.num_heads;
    entry["q_len"] = key.q_len;
    entry["page_size"] = key.page_size;
    entry["batch_bucket"] = key.batch_bucket;
    entry["times_us"] = times;
    entries.push_back(std::move(entry));
  }
  return json{{"version", kVersion}, {"entries", std::move(entries)}}.dump(2) + "\n";
}

PerfTable PerfTable::from_json(const std::string& text, const std::string& origin) {
  const std::string where = "perf_table";  // a named string: a temporary here reads as dangling to g++ 13
  const json root = parse_json_input(text, where, origin);
  if (!root.is_object()) throw InvalidArgument(where, -1, root.type_name(), "must be a JSON object");
  only_fields(root, where, {"version", "entries"});
  const json& version = member(root, "version", where);
  if (version != kVersion) {
    throw InvalidArgument("perf_table.version", -1, brief_json(version),
                          fmt::format("this build reads version {}", kVersion));
  }
  const json& entries = member(root, "entries", where);
  if (!entries.is_array()) {
    throw InvalidArgument("perf_table.entries", -1, entries.type_name(), "must be an array");
  }
  PerfTable table;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const json& entry = entries[i];
    const std::string where = fmt::format("perf_table.entries[{}]", i);
    if (!entry.is_object()) throw InvalidArgument(where, -1, entry.type_name(), "must be an object");
    only_fields(entry, where, {"arch", "kv_dtype", "heads", "q_len", "page_size", "batch_bucket", "times_us"});
    PerfKey key;
    const std::string arch = text_of(entry, "arch", where);
    const auto parsed_arch = parse_arch(arch);
    if (!parsed_arch) throw InvalidArgument(where + ".arch", -1, arch, "unknown architecture");
    key.arch = *parsed_arch;
    const std::string dtype = text_of(entry, "kv_dtype", where);
    const auto parsed_dtype = parse_dtype(dtype);
    if (!parsed_dtype || *parsed_dtype == DType::fp32) {
      throw InvalidArgument(where + ".kv_dtype", -1, dtype, "must be bf16, fp16 or fp8");
    }
    key.kv_dtype = *parsed_dtype;
    key.num_heads = int_in(entry, "heads", where, 1, kMaxHeads);
    key.q_len = int_in(entry, "q_len", where, 0);  // 0: a context phase
    key.page_size = int_in(entry, "page_size", where, 1);
    key.batch_bucket = int_in(entry, "batch_bucket", where, 1);
    // Shapes carry their batch as a power-of-two bucket: another value matches none.
    if (!std::has_single_bit(static_cast<std::uint32_t>(key.batch_bucket))) {
      throw InvalidArgument(where + ".batch_bucket", -1, std::to_string(key.batch_bucket), "must be a power of two");
    }
    const json& times = member(entry, "times_us", where);
    if (!times.is_object() || times.empty()) {
      throw InvalidArgument(where + ".times_us", -1, brief_json(times),
                            "must be a non-empty object of backend name to microseconds");
    }
    for (const auto& [backend, us] : times.items()) {
      if (backend.empty()) throw InvalidArgument(where + ".times_us", -1, "\"\"", "backend names must not be empty");
      if (!us.is_number() || !(us.get<double>() > 0.0)) {
        throw InvalidArgument(where + ".times_us." + backend, -1, brief_json(us), "must be a positive number");
      }
      if (const Times* known = table.find(key); known != nullptr && known->count(backend) != 0) {
        throw InvalidArgument(where + ".times_us." + backend, -1, brief_json(us),
                              "repeats the time of an earlier entry with the same shape");
      }
      table.record(key, backend, us.get<double>());
    }
  }
  return table;
}

PerfTable PerfTable::load(const std::string& path, const std::string& field) {
  return from_json(read_input_file(path, field, "performance table"), path);
}

void PerfTable::save(const std::string& path) const {
  std::ofstream out(path);
  out << to_json();
  out.close();  // the last buffered write fails here, not at <<
  if (!out) throw RuntimeFailure("cannot write performance table " + path);
}

}  // namespace helixmla

// Profile backends: the schema of include/helixmla/profile.hpp compiled into
// small predicate structures at load time, so a check costs a few compares
// and the selector's uncached path stays in the microsecond range.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/shipped_data.hpp"
#include "core/json_input.hpp"
#include "helixmla/error.hpp"
#include "helixmla/profile.hpp"
#include "helixmla/validate.hpp"

namespace helixmla {

namespace {

using nlohmann::json;

constexpr int kVersion = 1;
constexpr std::int32_t kMaxLength = 1 << 20;  // q_len and tile_q

// ---- shape fields a condition may test ------------------------------------

enum class Field : std::uint8_t {
  phase, heads, q_len, max_q_len, page_size, kv_dtype, q_dtype, out_dtype, kv_lora_rank, rope_dim,
  batch_bucket, batch_has_generations, helix, cp_size, has_stats, stats_fp32_contiguous, beam_width,
  mask, on_device, kv_dtype_is_q_dtype
};
enum class Kind : std::uint8_t { integer, boolean, dtype, phase, mask };

struct FieldInfo {
  std::string_view name;
  Field field;
  Kind kind;
};

constexpr FieldInfo kFields[] = {
    {"phase", Field::phase, Kind::phase},
    {"heads", Field::heads, Kind::integer},
    {"q_len", Field::q_len, Kind::integer},
    {"max_q_len", Field::max_q_len, Kind::integer},
    {"page_size", Field::page_size, Kind::integer},
    {"kv_dtype", Field::kv_dtype, Kind::dtype},
    {"q_dtype", Field::q_dtype, Kind::dtype},
    {"out_dtype", Field::out_dtype, Kind::dtype},
    {"kv_lora_rank", Field::kv_lora_rank, Kind::integer},
    {"rope_dim", Field::rope_dim, Kind::integer},
    {"batch_bucket", Field::batch_bucket, Kind::integer},
    {"batch_has_generations", Field::batch_has_generations, Kind::boolean},
    {"helix", Field::helix, Kind::boolean},
    {"cp_size", Field::cp_size, Kind::integer},
    {"has_stats", Field::has_stats, Kind::boolean},
    {"stats_fp32_contiguous", Field::stats_fp32_contiguous, Kind::boolean},
    {"beam_width", Field::beam_width, Kind::integer},
    {"mask", Field::mask, Kind::mask},
    {"on_device", Field::on_device, Kind::boolean},
    {"kv_dtype_is_q_dtype", Field::kv_dtype_is_q_dtype, Kind::boolean},
};

const FieldInfo& info(Field field) { return kFields[static_cast<std::size_t>(field)]; }

std::int64_t value_of(Field field, const PhaseShape& s) {
  switch (field) {
    case Field::phase: return static_cast<std::int64_t>(s.phase);
    case Field::heads: return s.num_heads;
    case Field::q_len: return s.q_len;
    case Field::max_q_len: return s.max_q_len;
    case Field::page_size: return s.page_size;
    case Field::kv_dtype: return static_cast<std::int64_t>(s.kv_dtype);
    case Field::q_dtype: return static_cast<std::int64_t>(s.q_dtype);
    case Field::out_dtype: return static_cast<std::int64_t>(s.out_dtype);
    case Field::kv_lora_rank: return s.dims.kv_lora_rank;
    case Field::rope_dim: return s.dims.rope_dim;
    case Field::batch_bucket: return s.batch_bucket;
    case Field::batch_has_generations: return s.batch_has_generations;
    case Field::helix: return s.helix;
    case Field::cp_size: return s.cp_size;
    case Field::has_stats: return s.has_stats;
    case Field::stats_fp32_contiguous: return s.stats_fp32_contiguous;
    case Field::beam_width: return s.beam_width;
    case Field::mask: return static_cast<std::int64_t>(s.mask);
    case Field::on_device: return s.on_device;
    case Field::kv_dtype_is_q_dtype: return s.kv_dtype == s.q_dtype;
  }
  return 0;
}

std::string format_value(Kind kind, std::int64_t v) {
  switch (kind) {
    case Kind::integer: return std::to_string(v);
    case Kind::boolean: return v ? "true" : "false";
    case Kind::dtype: return std::string(to_string(static_cast<DType>(v)));
    case Kind::phase: return static_cast<PhaseKind>(v) == PhaseKind::context ? "context" : "generation";
    case Kind::mask: {
      constexpr std::string_view names[] = {"linear", "tree", "custom"};
      return std::string(names[static_cast<std::size_t>(v)]);
    }
  }
  return std::to_string(v);
}

template <typename T>
bool contains(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// ---- reading JSON with errors that name the field --------------------------

[[noreturn]] void bad(const std::string& field, const json& value, const std::string& rule) {
  throw InvalidArgument(field, -1, brief_json(value), rule);
}

void only_keys(const json& object, const std::string& where, std::initializer_list<std::string_view> keys) {
  if (!object.is_object()) bad(where, object, "must be a JSON object");
  for (const auto& [key, value] : object.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string known;
      for (std::string_view k : keys) known += (known.empty() ? "" : ", ") + std::string(k);
      bad(where + "." + key, value, "unknown field; expected one of: " + known);
    }
  }
}

const json& required(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw InvalidArgument(where + "." + key, -1, "missing", "required field");
  return *it;
}

std::string string_at(const json& value, const std::string& field) {
  if (!value.is_string()) bad(field, value, "must be a string");
  return value.get<std::string>();
}

std::int64_t int_at(const json& value, const std::string& field) {
  if (!value.is_number_integer()) bad(field, value, "must be an integer");
  // nlohmann keeps integers past int64's range as unsigned; read as int64
  // they would wrap (2^64 - 1 to -1).
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max()) {
    bad(field, value, "is out of range");
  }
  return value.get<std::int64_t>();
}

// Checked before narrowing: a value outside int32 would otherwise wrap to an
// ordinary-looking one (4294967344 heads reads as 48).
std::int32_t int_in(const json& value, const std::string& field, std::int32_t min, std::int32_t max) {
  const std::int64_t v = int_at(value, field);
  if (v < min || v > max) bad(field, value, fmt::format("must be in [{}, {}]", min, max));
  return static_cast<std::int32_t>(v);
}

std::string optional_string(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  return it == object.end() ? std::string() : string_at(*it, where + "." + key);
}

// Descriptions are for the file's readers and never read here; their type is
// still checked, as every other field's is, so that a misplaced value (a
// number, a condition) is not passed over in silence.
void check_description(const json& object, const std::string& where) {
  const auto it = object.find("description");
  if (it != object.end()) string_at(*it, where + ".description");
}

// Checks in place rather than passing the value through: g++ 13 takes a
// reference returned by a call with a temporary argument (a built field
// name) for a dangling one.
void require_array(const json& value, const std::string& field) {
  if (!value.is_array()) bad(field, value, "must be an array");
}

Arch arch_at(const json& value, const std::string& field) {
  const auto arch = parse_arch(string_at(value, field));
  if (!arch) {
    bad(field, value, "unknown architecture; expected one of: " + to_string(kAllArchs));
  }
  return *arch;
}

PhaseKind phase_at(const json& value, const std::string& field) {
  const std::string name = string_at(value, field);
  if (name == "context") return PhaseKind::context;
  if (name == "generation") return PhaseKind::generation;
  bad(field, value, "must be \"context\" or \"generation\"");
}

// Integer shape fields are counts and sizes: a negative value in a
// condition would only ever match nothing or widen a range unnoticed.
std::int64_t shape_int_at(const json& value, const std::string& field) {
  const std::int64_t v = int_at(value, field);
  if (v < 0) bad(field, value, "must be >= 0 (shape fields are counts and sizes)");
  return v;
}

std::int64_t typed_value(Kind kind, const json& value, const std::string& field) {
  switch (kind) {
    case Kind::integer: return shape_int_at(value, field);
    case Kind::boolean:
      if (!value.is_boolean()) bad(field, value, "must be true or false");
      return value.get<bool>();
    case Kind::dtype: {
      const auto dtype = parse_dtype(string_at(value, field));
      if (!dtype) bad(field, value, "unknown dtype; expected bf16, fp16, fp8 or fp32");
      return static_cast<std::int64_t>(*dtype);
    }
    case Kind::phase: return static_cast<std::int64_t>(phase_at(value, field));
    case Kind::mask: {
      const std::string name = string_at(value, field);
      if (name == "linear") return static_cast<std::int64_t>(MaskKind::linear);
      if (name == "tree") return static_cast<std::int64_t>(MaskKind::tree);
      if (name == "custom") return static_cast<std::int64_t>(MaskKind::custom);
      bad(field, value, "must be linear, tree or custom");
    }
  }
  bad(field, value, "unsupported field type");
}

// ---- conditions ------------------------------------------------------------

struct Match {
  Field field{};
  std::vector<std::int64_t> values;  // empty: range only
  std::int64_t min = INT64_MIN;
  std::int64_t max = INT64_MAX;
  bool holds(std::int64_t v) const {
    if (v < min || v > max) return false;
    return values.empty() || std::find(values.begin(), values.end(), v) != values.end();
  }
};

struct Condition {
  std::vector<Match> all;
  std::vector<Condition> any_of;  // when non-empty, one of them must hold
  std::vector<Condition> negated;
  std::vector<Field> mentioned;   // every field it reads, for reasons

  bool holds(const PhaseShape& s) const {
    for (const Match& m : all) {
      if (!m.holds(value_of(m.field, s))) return false;
    }
    if (!any_of.empty() &&
        std::none_of(any_of.begin(), any_of.end(), [&](const Condition& c) { return c.holds(s); })) {
      return false;
    }
    return std::none_of(negated.begin(), negated.end(), [&](const Condition& c) { return c.holds(s); });
  }

  // "heads=48, page_size=64": the values the verdict depended on.
  std::string values(const PhaseShape& s) const {
    std::string text;
    for (Field f : mentioned) {
      text += fmt::format("{}{}={}", text.empty() ? "" : ", ", info(f).name,
                          format_value(info(f).kind, value_of(f, s)));
    }
    return text;
  }
};

void mention(std::vector<Field>& fields, const std::vector<Field>& more) {
  for (Field f : more) {
    if (std::find(fields.begin(), fields.end(), f) == fields.end()) fields.push_back(f);
  }
}

Match parse_match(const FieldInfo& field, const json& value, const std::string& where) {
  Match match;
  match.field = field.field;
  if (value.is_array()) {
    if (value.empty()) bad(where, value, "a list of values must not be empty");
    for (std::size_t i = 0; i < value.size(); ++i) {
      match.values.push_back(typed_value(field.kind, value[i], fmt::format("{}[{}]", where, i)));
    }
  } else if (value.is_object()) {
    if (field.kind != Kind::integer) bad(where, value, "a {min, max} range needs an integer field");
    only_keys(value, where, {"min", "max"});
    if (value.empty()) bad(where, value, "a range needs \"min\", \"max\" or both");
    if (value.contains("min")) match.min = shape_int_at(value["min"], where + ".min");
    if (value.contains("max")) match.max = shape_int_at(value["max"], where + ".max");
    if (match.min > match.max) bad(where, value, "min must not exceed max");
  } else {
    match.values.push_back(typed_value(field.kind, value, where));
  }
  return match;
}

Condition parse_condition(const json& object, const std::string& where) {
  if (!object.is_object()) bad(where, object, "a condition must be a JSON object of field: value");
  Condition cond;
  for (const auto& [key, value] : object.items()) {
    const std::string at = where + "." + key;
    if (key == "any_of") {
      require_array(value, at);
      if (value.empty()) bad(at, value, "must list at least one condition");
      for (std::size_t i = 0; i < value.size(); ++i) {
        cond.any_of.push_back(parse_condition(value[i], fmt::format("{}[{}]", at, i)));
        mention(cond.mentioned, cond.any_of.back().mentioned);
      }
      continue;
    }
    if (key == "not") {
      if (value.is_object() && value.empty()) {
        bad(at, value, "must name at least one field (an empty condition always holds, so its negation never does)");
      }
      cond.negated.push_back(parse_condition(value, at));
      mention(cond.mentioned, cond.negated.back().mentioned);
      continue;
    }
    const auto* field = std::find_if(std::begin(kFields), std::end(kFields),
                                     [&](const FieldInfo& f) { return f.name == key; });
    if (field == std::end(kFields)) {
      std::string known = "any_of, not";
      for (const FieldInfo& f : kFields) known += ", " + std::string(f.name);
      bad(at, value, "unknown shape field; expected one of: " + known);
    }
    cond.all.push_back(parse_match(*field, value, at));
    mention(cond.mentioned, {field->field});
  }
  return cond;
}

// ---- admission -------------------------------------------------------------

struct MinBatch {
  std::int32_t heads = 0;
  std::int32_t q_len = 0;
  std::int32_t min_batch = 1;
};

struct GateRule {
  Condition when;
  std::optional<Condition> require;
  std::vector<MinBatch> min_batch;  // used when `require` is empty
};

struct Step {
  enum class Kind : std::uint8_t { require, admit, performance_gate };
  Kind kind = Kind::require;
  Condition cond;
  std::vector<GateRule> gate;
  std::string reason;
};

std::vector<MinBatch> parse_min_batch(const json& value, const std::string& where) {
  require_array(value, where);
  std::vector<MinBatch> table;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    only_keys(value[i], at, {"heads", "q_len", "min_batch"});
    MinBatch row;
    row.heads = int_in(required(value[i], "heads", at), at + ".heads", 1, kMaxHeads);
    row.q_len = int_in(required(value[i], "q_len", at), at + ".q_len", 1, kMaxLength);
    const std::int64_t floor = int_at(required(value[i], "min_batch", at), at + ".min_batch");
    if (floor < 1 || floor > (1 << 30) || !std::has_single_bit(static_cast<std::uint64_t>(floor))) {
      bad(at + ".min_batch", value[i]["min_batch"],
          "must be a power of two >= 1: shapes carry only the power-of-two batch bucket");
    }
    row.min_batch = static_cast<std::int32_t>(floor);
    for (const MinBatch& other : table) {
      if (other.heads == row.heads && other.q_len == row.q_len) {
        bad(at, value[i], "duplicate (heads, q_len) key");
      }
    }
    table.push_back(row);
  }
  return table;
}

Step parse_step(const json& object, const std::string& where) {
  only_keys(object, where, {"require", "admit", "performance_gate", "reason", "description"});
  Step step;
  step.reason = optional_string(object, "reason", where);
  check_description(object, where);
  const int kinds = object.contains("require") + object.contains("admit") + object.contains("performance_gate");
  if (kinds != 1) bad(where, object, "a step has exactly one of \"require\", \"admit\", \"performance_gate\"");
  if (object.contains("require")) {
    step.kind = Step::Kind::require;
    step.cond = parse_condition(object["require"], where + ".require");
  } else if (object.contains("admit")) {
    step.kind = Step::Kind::admit;
    step.cond = parse_condition(object["admit"], where + ".admit");
  } else {
    step.kind = Step::Kind::performance_gate;
    const std::string at = where + ".performance_gate";
    const json& rules = object["performance_gate"];
    require_array(rules, at);
    if (rules.empty()) bad(at, rules, "must list at least one rule");
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const std::string rule_at = fmt::format("{}[{}]", at, i);
      only_keys(rules[i], rule_at, {"when", "require", "min_batch", "description"});
      GateRule rule;
      check_description(rules[i], rule_at);
      rule.when = parse_condition(required(rules[i], "when", rule_at), rule_at + ".when");
      if (rules[i].contains("require") == rules[i].contains("min_batch")) {
        bad(rule_at, rules[i], "a gate rule has exactly one of \"require\" and \"min_batch\"");
      }
      if (rules[i].contains("require")) {
        rule.require = parse_condition(rules[i]["require"], rule_at + ".require");
      } else {
        rule.min_batch = parse_min_batch(rules[i]["min_batch"], rule_at + ".min_batch");
      }
      step.gate.push_back(std::move(rule));
    }
  }
  if (step.reason.empty()) {
    step.reason = step.kind == Step::Kind::performance_gate ? "performance gate" : "admission rule";
  }
  return step;
}

// ---- kernels ---------------------------------------------------------------

struct Family {
  std::string name;
  Condition when;
  std::int32_t tile_q = 0;
  std::vector<std::int32_t> precompiled_pages;
  bool jit_any_page = false;
  std::vector<std::int32_t> jit_pages;
  std::string missing;
  std::optional<std::string> invalid;
};

std::string fill(std::string text, const PhaseShape& s, const Family& family) {
  const std::pair<std::string_view, std::string> slots[] = {
      {"{heads}", std::to_string(s.num_heads)},
      {"{q_len}", std::to_string(s.q_len)},
      {"{page_size}", std::to_string(s.page_size)},
      {"{tile_q}", std::to_string(family.tile_q)},
  };
  for (const auto& [slot, value] : slots) {
    for (std::size_t at = text.find(slot); at != std::string::npos; at = text.find(slot, at + value.size())) {
      text.replace(at, slot.size(), value);
    }
  }
  return text;
}

std::vector<std::int32_t> page_list(const json& value, const std::string& where) {
  require_array(value, where);
  std::vector<std::int32_t> pages;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::int64_t page = int_at(value[i], fmt::format("{}[{}]", where, i));
    if (page < 1 || page > (1 << 20)) bad(fmt::format("{}[{}]", where, i), value[i], "must be a page size >= 1");
    pages.push_back(static_cast<std::int32_t>(page));
  }
  return pages;
}

Family parse_family(const json& object, const std::string& where) {
  only_keys(object, where, {"name", "when", "tile_q", "precompiled_page_sizes", "jit_page_sizes", "missing",
                            "invalid", "description"});
  Family family;
  family.name = string_at(required(object, "name", where), where + ".name");
  check_description(object, where);
  if (object.contains("when")) family.when = parse_condition(object["when"], where + ".when");
  if (object.contains("tile_q")) {
    family.tile_q = int_in(object["tile_q"], where + ".tile_q", 1, kMaxLength);
  }
  if (object.contains("invalid")) family.invalid = string_at(object["invalid"], where + ".invalid");
  if (object.contains("precompiled_page_sizes")) {
    family.precompiled_pages = page_list(object["precompiled_page_sizes"], where + ".precompiled_page_sizes");
  }
  if (object.contains("jit_page_sizes")) {
    const json& jit = object["jit_page_sizes"];
    if (jit.is_string()) {
      if (jit != "any") bad(where + ".jit_page_sizes", jit, "must be \"any\" or a list of page sizes");
      family.jit_any_page = true;
    } else {
      family.jit_pages = page_list(jit, where + ".jit_page_sizes");
    }
  }
  family.missing = optional_string(object, "missing", where);
  if (family.missing.empty()) family.missing = "no " + family.name + " kernel for page size {page_size}";
  if (!family.invalid && family.precompiled_pages.empty() && !family.jit_any_page && family.jit_pages.empty()) {
    bad(where, object, "a kernel family needs \"precompiled_page_sizes\", \"jit_page_sizes\" or \"invalid\"");
  }
  return family;
}

class ProfileCatalog final : public KernelCatalog {
 public:
  std::vector<Family> families;
  std::string none_reason;
  bool lookup_at_run = false;

  std::vector<KernelVariant> inventory(const Environment&) const override {
    std::vector<KernelVariant> variants;
    for (const Family& f : families) {
      if (f.invalid) continue;
      for (std::int32_t page : f.precompiled_pages) variants.push_back({variant_name(f, page), true});
      for (std::int32_t page : f.jit_pages) variants.push_back({variant_name(f, page), false});
      if (f.jit_any_page) variants.push_back({f.name + "/page*", false});
    }
    return variants;
  }

  Verdict can_implement(const PhaseShape& shape, const Environment&, KernelVariant* chosen) const override {
    KernelVariant variant;
    Verdict verdict = lookup(shape, variant);
    if (!verdict && lookup_at_run) {
      // The replayed system chose this backend on its admission alone; the
      // lookup that fails here happened only when the call ran.
      variant = {};
      verdict = Verdict::yes(std::string(kFailsAtRun) + verdict.reason +
                             "; admitted because this system looks its kernels up only when the call runs");
    }
    if (verdict && chosen) *chosen = variant;
    return verdict;
  }

 private:
  static std::string variant_name(const Family& f, std::int32_t page) {
    return fmt::format("{}/page{}", f.name, page);
  }
  static bool contains(const std::vector<std::int32_t>& pages, std::int32_t page) {
    return std::find(pages.begin(), pages.end(), page) != pages.end();
  }

  Verdict lookup(const PhaseShape& shape, KernelVariant& variant) const {
    const auto it = std::find_if(families.begin(), families.end(),
                                 [&](const Family& f) { return f.when.holds(shape); });
    if (it == families.end()) {
      variant.name = "(none)";
      return Verdict::no(none_reason);
    }
    const Family& f = *it;
    variant.name = variant_name(f, shape.page_size);
    if (f.invalid) return Verdict::no(fill(*f.invalid, shape, f));
    if (contains(f.precompiled_pages, shape.page_size)) {
      variant.precompiled = true;
      return Verdict::yes();
    }
    if (f.jit_any_page || contains(f.jit_pages, shape.page_size)) {
      variant.precompiled = false;
      return Verdict::yes();
    }
    return Verdict::no(fill(f.missing, shape, f));
  }
};

// ---- the backend -----------------------------------------------------------

class ProfileBackend final : public Backend {
 public:
  std::string name_;
  int priority_ = 0;
  std::vector<Arch> archs_;
  std::vector<Step> steps_;
  ProfileCatalog catalog_;

  std::string_view name() const override { return name_; }
  int priority() const override { return priority_; }
  bool executable() const override { return false; }

  Verdict available(const Environment& env) const override {
    if (std::find(archs_.begin(), archs_.end(), env.arch) == archs_.end()) {
      return Verdict::no(fmt::format("{} is available on {} only; this is {}", name_, to_string(archs_),
                                     to_string(env.arch)));
    }
    return Verdict::yes();
  }

  Verdict check(const PhaseShape& shape) const override {
    const Step* admitted_by = nullptr;
    std::string gate_note;
    for (const Step& step : steps_) {
      switch (step.kind) {
        case Step::Kind::require:
          if (!step.cond.holds(shape)) return reject(step.reason, step.cond, shape);
          break;
        case Step::Kind::admit:
          if (!admitted_by && step.cond.holds(shape)) admitted_by = &step;
          break;
        case Step::Kind::performance_gate:
          if (admitted_by) break;
          if (Verdict gate = pass_gate(step, shape); !gate) {
            return gate;
          } else {
            gate_note = std::move(gate.reason);
          }
          break;
      }
    }
    if (admitted_by) {
      return Verdict::yes(fmt::format("correctness admission: {} ({}); the performance gate is skipped",
                                      admitted_by->reason, admitted_by->cond.values(shape)));
    }
    return Verdict::yes(std::move(gate_note));
  }

  const KernelCatalog& catalog() const override { return catalog_; }

 private:
  static Verdict reject(const std::string& reason, const Condition& cond, const PhaseShape& shape) {
    const std::string got = cond.values(shape);
    return Verdict::no(got.empty() ? reason : fmt::format("{}; got {}", reason, got));
  }

  static Verdict pass_gate(const Step& step, const PhaseShape& shape) {
    for (const GateRule& rule : step.gate) {
      if (!rule.when.holds(shape)) continue;
      const std::string scope = rule.when.values(shape);
      if (rule.require) {
        if (!rule.require->holds(shape)) {
          return Verdict::no(fmt::format("{} rejects ({}): {} not admitted", step.reason, scope,
                                         rule.require->values(shape)));
        }
        return Verdict::yes(fmt::format("{} admits ({}, {})", step.reason, scope, rule.require->values(shape)));
      }
      const auto row = std::find_if(rule.min_batch.begin(), rule.min_batch.end(), [&](const MinBatch& m) {
        return m.heads == shape.num_heads && m.q_len == shape.q_len;
      });
      if (row == rule.min_batch.end()) {
        return Verdict::no(fmt::format("{} rejects ({}): no minimum batch measured for (heads={}, q_len={}), "
                                       "and a missing key rejects",
                                       step.reason, scope, shape.num_heads, shape.q_len));
      }
      if (shape.batch_bucket < row->min_batch) {
        return Verdict::no(fmt::format("{} rejects ({}): batch bucket {} is below the floor {} for "
                                       "(heads={}, q_len={})",
                                       step.reason, scope, shape.batch_bucket, row->min_batch, shape.num_heads,
                                       shape.q_len));
      }
      return Verdict::yes(fmt::format("{} admits ({}): batch bucket {} >= floor {} for (heads={}, q_len={})",
                                      step.reason, scope, shape.batch_bucket, row->min_batch, shape.num_heads,
                                      shape.q_len));
    }
    return Verdict::no(step.reason + " rejects: no rule covers this shape");
  }
};

std::shared_ptr<ProfileBackend> parse_backend(const json& object, const std::string& where) {
  only_keys(object, where, {"name", "priority", "description", "archs", "admission", "kernels"});
  auto backend = std::make_shared<ProfileBackend>();
  backend->name_ = string_at(required(object, "name", where), where + ".name");
  if (backend->name_.empty()) bad(where + ".name", object["name"], "must not be empty");
  check_description(object, where);
  const std::int64_t priority = int_at(required(object, "priority", where), where + ".priority");
  if (priority < -1000000 || priority > 1000000) bad(where + ".priority", object["priority"], "out of range");
  backend->priority_ = static_cast<int>(priority);

  const json& archs = required(object, "archs", where);
  require_array(archs, where + ".archs");
  // An empty list would leave the backend unavailable on every machine.
  if (archs.empty()) bad(where + ".archs", archs, "must list at least one architecture");
  for (std::size_t i = 0; i < archs.size(); ++i) {
    const std::string at = fmt::format("{}.archs[{}]", where, i);
    const Arch arch = arch_at(archs[i], at);
    if (contains(backend->archs_, arch)) bad(at, archs[i], "repeats an earlier architecture");
    backend->archs_.push_back(arch);
  }
  if (const auto it = object.find("admission"); it != object.end()) {
    require_array(*it, where + ".admission");
    for (std::size_t i = 0; i < it->size(); ++i) {
      backend->steps_.push_back(parse_step((*it)[i], fmt::format("{}.admission[{}]", where, i)));
    }
  }

  const std::string at = where + ".kernels";
  const json& kernels = required(object, "kernels", where);
  only_keys(kernels, at, {"lookup", "families", "none", "description"});
  check_description(kernels, at);
  const std::string lookup = kernels.contains("lookup") ? string_at(kernels["lookup"], at + ".lookup")
                                                        : std::string("at_selection");
  if (lookup != "at_selection" && lookup != "at_run") {
    bad(at + ".lookup", kernels["lookup"], "must be \"at_selection\" or \"at_run\"");
  }
  backend->catalog_.lookup_at_run = lookup == "at_run";
  const json& families = required(kernels, "families", at);
  require_array(families, at + ".families");
  if (families.empty()) bad(at + ".families", families, "must list at least one kernel family");
  for (std::size_t i = 0; i < families.size(); ++i) {
    backend->catalog_.families.push_back(parse_family(families[i], fmt::format("{}.families[{}]", at, i)));
  }
  backend->catalog_.none_reason = optional_string(kernels, "none", at);
  if (backend->catalog_.none_reason.empty()) backend->catalog_.none_reason = "no kernel family covers this shape";
  return backend;
}

}  // namespace

bool fails_at_run(const Candidate& candidate) {
  return candidate.capable && candidate.reason.find(kFailsAtRun) != std::string::npos;
}

Profile parse_profile(const std::string& json_text, const std::string& origin) {
  const json root = parse_json_input(json_text, "profile", origin);
  const std::string where = "profile";
  only_keys(root, where, {"version", "name", "description", "scope", "backends"});
  const json& version = required(root, "version", where);
  if (version != kVersion) bad("profile.version", version, fmt::format("this build reads version {}", kVersion));

  Profile profile;
  profile.origin = origin;
  profile.name = string_at(required(root, "name", where), "profile.name");
  // The name becomes part of file names (sweep pictures): no path parts.
  const bool plain_name =
      !profile.name.empty() && profile.name.front() != '.' &&
      std::all_of(profile.name.begin(), profile.name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
               c == '.';
      });
  if (!plain_name) bad("profile.name", root["name"], "must be letters, digits, '_', '-' or '.', not starting with '.'");
  profile.description = optional_string(root, "description", where);

  profile.archs.assign(std::begin(kAllArchs), std::end(kAllArchs));
  profile.phases = {PhaseKind::context, PhaseKind::generation};
  if (const auto scope = root.find("scope"); scope != root.end()) {
    only_keys(*scope, "profile.scope", {"archs", "phases"});
    if (scope->contains("archs")) {
      const json& archs = (*scope)["archs"];
      require_array(archs, "profile.scope.archs");
      if (archs.empty()) bad("profile.scope.archs", archs, "must list at least one architecture");
      profile.archs.clear();
      for (std::size_t i = 0; i < archs.size(); ++i) {
        const std::string at = fmt::format("profile.scope.archs[{}]", i);
        const Arch arch = arch_at(archs[i], at);
        // A sweep would go over it twice and count each of its shapes twice.
        if (contains(profile.archs, arch)) bad(at, archs[i], "repeats an earlier architecture");
        profile.archs.push_back(arch);
      }
    }
    if (scope->contains("phases")) {
      const json& phases = (*scope)["phases"];
      require_array(phases, "profile.scope.phases");
      if (phases.empty()) bad("profile.scope.phases", phases, "must list at least one phase");
      profile.phases.clear();
      for (std::size_t i = 0; i < phases.size(); ++i) {
        const std::string at = fmt::format("profile.scope.phases[{}]", i);
        const PhaseKind phase = phase_at(phases[i], at);
        if (contains(profile.phases, phase)) bad(at, phases[i], "repeats an earlier phase");
        profile.phases.push_back(phase);
      }
    }
  }

  const json& backends = required(root, "backends", where);
  require_array(backends, "profile.backends");
  if (backends.empty()) bad("profile.backends", backends, "must describe at least one backend");
  std::set<std::string> names;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const std::string at = fmt::format("profile.backends[{}]", i);
    auto backend = parse_backend(backends[i], at);
    // Unavailable wherever the profile is swept or explained by default: a
    // contradiction that would only show as every shape being unroutable.
    if (std::none_of(backend->archs_.begin(), backend->archs_.end(),
                     [&](Arch arch) { return contains(profile.archs, arch); })) {
      bad(at + ".archs", backends[i]["archs"],
          "lists none of the profile's architectures (profile.scope.archs: " + to_string(profile.archs) + ")");
    }
    if (!names.insert(backend->name_).second) bad(at + ".name", backends[i]["name"], "duplicate backend name");
    profile.backends.push_back(std::move(backend));
  }
  return profile;
}

Profile load_profile_file(const std::string& path) {
  return parse_profile(read_input_file(path, "profile", "profile"), path);
}

std::vector<std::string> profile_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* dir = std::getenv("HELIXMLA_PROFILE_DIR"); dir && *dir) dirs.emplace_back(dir);
  for (const std::string& root : shipped_data_roots()) dirs.push_back(root + "/profiles");
  return dirs;
}

Profile load_profile(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (is_path) return load_profile_file(name_or_path);
  std::string looked;
  for (const std::string& dir : profile_search_dirs()) {
    const std::string path = dir + "/" + name_or_path + ".json";
    if (std::filesystem::is_regular_file(path)) return load_profile_file(path);
    looked += (looked.empty() ? "" : ", ") + path;
  }
  throw InvalidArgument("profile", -1, name_or_path, "no such profile; looked for " + looked);
}

}  // namespace helixmla

#include "problem_flags.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "comma_list.hpp"
#include "helixmla/planner.hpp"
#include "helixmla/validate.hpp"
#include "integer_flag.hpp"
#include "parallel_naive_attention.hpp"

namespace helixmla::tools {

namespace {

// CLI11 reads "-1" into an unsigned seed as 2^64 - 1 and saturates a seed
// past 2^64: either would run a batch other than the one asked for,
// silently, so the seed reads its own text (as comma lists do, comma_list.hpp).
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw CLI::ValidationError("--seed", "'" + text + "' is not an integer in [0, 18446744073709551615]");
  }
  return seed;
}

}  // namespace

std::string kv_dtype_complaint(const std::string& name) {
  return parse_kv_dtype(name) ? std::string() : "expected bf16, fp16 or fp8";
}

void add_problem_flags(CLI::App& app, ProblemFlags& flags) {
  app.add_option("--heads", flags.heads, "Query heads per rank (1..128)")
      ->capture_default_str()->transform(integer_in(1, 128));
  app.add_option("--q-len", flags.q_len, "Query tokens per generation: 1 is decode, >1 a verify group")
      ->capture_default_str()->transform(integer_in(1, 1 << 20));
  app.add_option("--batch", flags.batch, "Generation requests")
      ->capture_default_str()->transform(integer_in(0, 1 << 20));
  add_int_list(app, "--kv-len", flags.kv_len, 1, 1 << 30,
               "Cached tokens per generation, new tokens included: one value, or a comma list (at most --batch "
               "values) cycled over the requests",
               Repeats::allowed);
  app.add_option("--page-size", flags.page_size, "Tokens per KV-cache page (any integer >= 1)")
      ->capture_default_str()->transform(integer_in(1, 1 << 20));
  app.add_option("--kv-dtype", flags.kv_dtype,
                 "KV-cache element type (bf16, fp16, fp8); Q and the output are fp16 with fp16 KV, bf16 otherwise")
      ->capture_default_str()->check(
          [](const std::string& name) {
            const std::string complaint = kv_dtype_complaint(name);
            return complaint.empty() ? complaint : "'" + name + "': " + complaint;
          },
          "KV dtype");
  app.add_option("--contexts", flags.contexts, "Context (prefill) requests placed before the generations")
      ->capture_default_str()->transform(integer_in(0, 1 << 20));
  app.add_option("--context-len", flags.context_len, "New tokens (and KV length) of each context request")
      ->capture_default_str()->transform(integer_in(1, 1 << 20));
  app.add_option_function<std::string>(
         "--seed", [&flags](const std::string& text) { flags.seed = parse_seed(text); },
         "Random seed for the synthetic batch")
      ->type_name("UINT64")->default_str("1");
  app.add_option("--backend", flags.backend,
                 "Force a backend (cpu, cuda_generic, cuda_tensorcore); an error if it cannot run the batch")
      ->check(non_empty());
  app.add_flag("--stats", flags.stats,
               "Also produce softmax statistics (m, l); not with Helix (--cp, --devices), whose ranks' "
               "statistics are combined into the output");
}

void require_known_backend(const std::string& name, const std::vector<BackendPtr>& backends,
                           const std::string& owner) {
  if (name.empty()) return;
  std::string known;
  for (const BackendPtr& backend : backends) {
    if (backend->name() == name) return;
    known += (known.empty() ? "" : ", ") + std::string(backend->name());
  }
  throw CLI::ValidationError("--backend", "unknown backend " + name + "; " + owner + " has " + known);
}

// The synthetic batch lives in host memory (page table always; for `run`
// its tensors and the float64 reference output too): refuse, naming the
// flags and sizes, what would exhaust it instead of dying of bad_alloc or
// the OOM killer minutes later.
std::string host_footprint_complaint(const testing::BatchSpec& spec, int layers) {
  const testing::HostFootprint footprint = testing::host_footprint(spec);
  // The float64 check's output, and the KV it decodes for each request one
  // of its threads is working on.
  const double checking_requests =
      static_cast<double>(std::min<std::int64_t>(footprint.requests, testing::parallel_naive_threads()));
  const double reference_bytes =
      spec.allocate_tensors
          ? static_cast<double>(footprint.tokens) * spec.heads * spec.dims.kv_lora_rank * 8.0 +
                checking_requests * static_cast<double>(footprint.longest_kv) * spec.dims.head_dim() * 8.0
          : 0.0;
  // The layers are checked one after another, so one check's memory serves them all.
  const double total = layers * (footprint.page_table_bytes + footprint.tensor_bytes) + reference_bytes;
  constexpr double kGiB = 1ull << 30;
  constexpr double kTableLimit = 1.0 * kGiB;   // 2^28 page-table entries
  constexpr double kTotalLimit = 16.0 * kGiB;  // the 2 x 1M-token Helix batch needs ~12 (9 of it its check)
  if (footprint.page_table_bytes <= kTableLimit && total <= kTotalLimit) return {};
  return fmt::format("{} {:.1f} GiB of host memory ({:.1f} GiB of page table{}); the limits are 16 GiB in all "
                     "and 1 GiB of page table",
                     layers > 1 ? fmt::format("{} layers of this batch need", layers) : "this batch needs",
                     total / kGiB, footprint.page_table_bytes / kGiB, layers > 1 ? " each" : "");
}

std::string unused_lengths_complaint(std::size_t lengths, std::int32_t batch, const std::string& batch_name) {
  if (lengths <= static_cast<std::size_t>(batch)) return {};
  return fmt::format("{} lengths for {} {}: the lengths past the batch's requests would go unused", lengths,
                     batch_name, batch);
}

void refuse_lengths_without_requests(const CLI::App& command, const ProblemFlags& flags) {
  if (flags.batch == 0 && command.count("--kv-len") > 0) {
    throw CLI::ValidationError("--kv-len", "sets the generations' lengths, and --batch 0 has none");
  }
  if (flags.batch == 0 && command.count("--q-len") > 0) {
    throw CLI::ValidationError("--q-len", fmt::format("{} sets the generations' query tokens, and --batch 0 has none",
                                                      flags.q_len));
  }
  if (flags.contexts == 0 && command.count("--context-len") > 0) {
    throw CLI::ValidationError("--context-len", fmt::format("{} sets the context requests' length, and --contexts 0 "
                                                            "has none",
                                                            flags.context_len));
  }
}

namespace {

void check_host_footprint(const testing::BatchSpec& spec) {
  if (const std::string complaint = host_footprint_complaint(spec); !complaint.empty()) {
    throw CLI::ValidationError("--batch/--kv-len/--page-size/--q-len/--contexts", complaint);
  }
}

}  // namespace

testing::BatchSpec to_batch_spec(const ProblemFlags& flags, bool allocate_tensors) {
  if (flags.batch + flags.contexts == 0) {
    throw CLI::ValidationError("--batch", "the batch is empty: give --batch or --contexts > 0");
  }
  testing::BatchSpec spec;
  spec.heads = flags.heads;
  spec.generations = flags.batch;
  spec.q_len = flags.q_len;
  spec.kv_len = flags.kv_len;
  if (flags.batch > 0) {
    if (const std::string complaint = unused_lengths_complaint(flags.kv_len.size(), flags.batch, "--batch");
        !complaint.empty()) {
      throw CLI::ValidationError("--kv-len", complaint);
    }
  }
  for (std::size_t i = 0; i < flags.kv_len.size() && flags.batch > 0; ++i) {
    if (flags.kv_len[i] < flags.q_len) {
      throw CLI::ValidationError("--kv-len", "value " + std::to_string(flags.kv_len[i]) + " at index " +
                                                 std::to_string(i) + " is shorter than --q-len " +
                                                 std::to_string(flags.q_len));
    }
  }
  spec.contexts = flags.contexts;
  spec.context_len = flags.context_len;
  spec.page_size = flags.page_size;
  spec.use_kv_dtype(*parse_kv_dtype(flags.kv_dtype));
  spec.stats = flags.stats;
  spec.seed = flags.seed;
  spec.allocate_tensors = allocate_tensors;
  check_host_footprint(spec);
  return spec;
}

std::vector<PhaseShape> phase_shapes(const ProblemFlags& flags, const Environment& env, int cp) {
  testing::SyntheticBatch batch(to_batch_spec(flags, false));
  const Problem whole = batch.problem();
  // What a run of this batch would be refused for, it is refused for here.
  // The batch holds no tensors, and validate() reads none: any address
  // stands in for them.
  Problem checked = whole;
  float placeholder = 0.0f;
  checked.q = &placeholder;
  checked.out = &placeholder;
  checked.kv.pool = &placeholder;
  if (flags.stats) checked.stats.data = &placeholder;
  validate(checked);
  // `run --backend cpu` keeps the batch in host memory even on a GPU machine.
  const bool on_device = flags.backend != "cpu" && env.has_gpu() &&
                         (env.built("cuda_generic") || env.built("cuda_tensorcore"));
  std::vector<PhaseShape> shapes;
  const PhasePlan plan = plan_phases(whole);
  for (const auto* phase : {&plan.context, &plan.generation}) {
    if (!*phase) continue;
    PhaseShape shape = shape_of(**phase, whole);
    shape.on_device = on_device;
    if (cp > 1) {
      shape.helix = true;
      shape.cp_size = cp;
      shape.has_stats = true;
      shape.stats_fp32_contiguous = true;
    } else {
      shape.has_stats = flags.stats;
    }
    shapes.push_back(shape);
  }
  return shapes;
}

}  // namespace helixmla::tools

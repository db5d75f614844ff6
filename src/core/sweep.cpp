#include "core/sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/candidates.hpp"
#include "helixmla/error.hpp"
#include "helixmla/profile.hpp"

namespace helixmla {

SweepSpace::SweepSpace() : heads(128), q_lens(16) {
  std::iota(heads.begin(), heads.end(), 1);
  std::iota(q_lens.begin(), q_lens.end(), 1);
}

std::int64_t SweepResult::points() const {
  std::int64_t total = 0;
  for (const SweepArch& a : archs) total += a.points;
  return total;
}

Environment sweep_environment(const std::vector<BackendPtr>& backends, Arch arch) {
  Environment env;
  env.arch = arch;
  env.device_count = arch == Arch::none ? 0 : 1;
  env.nvrtc = true;
  for (const BackendPtr& b : backends) env.built_backends.insert(std::string(b->name()));
  return env;
}

namespace {

bool contains(const std::vector<PhaseKind>& phases, PhaseKind kind) {
  return std::find(phases.begin(), phases.end(), kind) != phases.end();
}

std::vector<DType> q_dtypes_for(const SweepSpace& space, DType kv) {
  return kv == DType::fp8_e4m3 ? space.fp8_q_dtypes : std::vector<DType>{kv};
}

// The shape shape_of() derives for a phase of the batch this cell describes.
PhaseShape cell_shape(const SweepSpace& space, Arch arch, PhaseKind phase, DType kv, DType q, bool helix,
                      std::int32_t page, std::int32_t heads, std::int32_t q_len) {
  PhaseShape s;
  s.phase = phase;
  s.num_heads = heads;
  s.kv_dtype = kv;
  s.q_dtype = s.out_dtype = q;
  s.page_size = page;
  if (phase == PhaseKind::generation) {
    s.q_len = q_len;
    s.max_q_len = max_q_len_bucket_of(q_len);
    s.batch_bucket = batch_bucket_of(space.generations);
  } else {
    s.q_len = 0;
    s.max_q_len = max_q_len_bucket_of(space.context_len);
    s.batch_bucket = batch_bucket_of(space.contexts);
  }
  s.batch_has_generations = true;
  s.helix = helix;
  s.cp_size = helix ? space.cp_size : 1;
  s.has_stats = helix;
  s.stats_fp32_contiguous = true;
  s.on_device = arch != Arch::none && space.device_tensors;
  return s;
}

struct PanelSpec {
  DType kv;
  bool helix;
  std::int32_t q_len;
  const char* what;
};

constexpr PanelSpec kPanels[] = {
    {DType::bf16, false, 1, "decode"},          {DType::bf16, true, 1, "Helix decode"},
    {DType::bf16, true, 4, "Helix verify q_len 4"}, {DType::fp8_e4m3, false, 1, "decode"},
    {DType::fp8_e4m3, true, 1, "Helix decode"},  {DType::fp8_e4m3, true, 4, "Helix verify q_len 4"},
};

template <typename T>
bool has(const std::vector<T>& values, const T& v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

class ArchSweep {
 public:
  ArchSweep(const std::vector<BackendPtr>& backends, const SweepSpace& space, Arch arch, SweepResult& result,
            const SweepHooks& hooks)
      : selector_(backends, sweep_environment(backends, arch), PerfTable{}),
        space_(space),
        result_(result),
        hooks_(hooks) {
    out_.arch = arch;
    wins_.assign(selector_.backends().size(), 0);
    for (const PanelSpec& p : kPanels) {
      if (!has(space.kv_dtypes, p.kv) || !has(space.helix, p.helix) || !has(space.q_lens, p.q_len) ||
          !contains(space.phases, PhaseKind::generation)) {
        continue;
      }
      SweepPanel panel;
      panel.title = fmt::format("{} KV, {}", to_string(p.kv), p.what);
      panel.kv_dtype = p.kv;
      panel.helix = p.helix;
      panel.q_len = p.q_len;
      panel.cells.assign(space.heads.size() * space.page_sizes.size(), SweepPanel::kUnroutable);
      out_.panels.push_back(std::move(panel));
    }
  }

  SweepArch run(std::size_t blocks_before, std::size_t blocks_total) {
    const Arch arch = out_.arch;
    const bool want_context = space_.mixed_batches && contains(space_.phases, PhaseKind::context);
    const bool want_generation = contains(space_.phases, PhaseKind::generation);
    std::size_t block = blocks_before;
    for (DType kv : space_.kv_dtypes) {
      const std::vector<DType> q_dtypes = q_dtypes_for(space_, kv);
      for (DType q : q_dtypes) {
        const bool pictured = q == q_dtypes.front();
        for (bool helix : space_.helix) {
          for (std::size_t pi = 0; pi < space_.page_sizes.size(); ++pi) {
            const std::int32_t page = space_.page_sizes[pi];
            for (std::size_t hi = 0; hi < space_.heads.size(); ++hi) {
              const std::int32_t heads = space_.heads[hi];
              const PhaseShape context = cell_shape(space_, arch, PhaseKind::context, kv, q, helix, page, heads, 0);
              const std::optional<Decision> context_choice =
                  want_context ? decide(context) : std::optional<Decision>();
              if (!want_generation) {
                if (want_context) emit(true, context, context_choice);
                continue;
              }
              for (std::int32_t q_len : space_.q_lens) {
                const PhaseShape generation =
                    cell_shape(space_, arch, PhaseKind::generation, kv, q, helix, page, heads, q_len);
                const std::optional<Decision> choice = decide(generation);
                emit(false, generation, choice);
                if (pictured) paint(kv, helix, q_len, hi, pi, choice);
                if (want_context) {
                  emit(true, context, context_choice);
                  emit(true, generation, choice);
                }
              }
            }
          }
          if (hooks_.progress) hooks_.progress(arch, static_cast<double>(++block) / static_cast<double>(blocks_total));
        }
      }
    }
    for (std::size_t i = 0; i < wins_.size(); ++i) {
      if (wins_[i] > 0) out_.wins[std::string(selector_.backends()[i]->name())] = wins_[i];
    }
    return std::move(out_);
  }

 private:
  std::optional<Decision> decide(const PhaseShape& shape) {
    try {
      Decision decision = selector_.select_uncached(shape);
      const auto chosen = std::find_if(decision.candidates.begin(), decision.candidates.end(),
                                       [&](const Candidate& c) { return c.backend == decision.choice; });
      if (chosen != decision.candidates.end() && fails_at_run(*chosen)) {
        result_.fails_at_run.push_back({out_.arch, shape, decision.candidates});
      }
      return decision;
    } catch (const NoCapableBackend&) {
      result_.unroutable.push_back({out_.arch, shape, assess_all(selector_.backends(), shape, selector_.environment())});
      return std::nullopt;
    }
  }

  std::size_t index_of(const Decision& d) const {
    const auto& all = selector_.backends();
    return static_cast<std::size_t>(std::find(all.begin(), all.end(), d.backend) - all.begin());
  }

  void emit(bool mixed, const PhaseShape& shape, const std::optional<Decision>& decision) {
    ++out_.points;
    if (decision) {
      ++wins_[index_of(*decision)];
    } else {
      ++out_.unroutable_points;
    }
    if (hooks_.visit) hooks_.visit(SweepPoint{selector_.environment(), mixed, shape, decision ? &*decision : nullptr});
  }

  void paint(DType kv, bool helix, std::int32_t q_len, std::size_t hi, std::size_t pi,
             const std::optional<Decision>& decision) {
    for (SweepPanel& panel : out_.panels) {
      if (panel.kv_dtype != kv || panel.helix != helix || panel.q_len != q_len) continue;
      std::int16_t value = SweepPanel::kUnroutable;
      if (decision) {
        value = static_cast<std::int16_t>(index_of(*decision));
        const auto& chosen = decision->candidates[static_cast<std::size_t>(value)];
        if (fails_at_run(chosen)) value = SweepPanel::kFailsAtRun;
      }
      panel.cells[hi * space_.page_sizes.size() + pi] = value;
    }
  }

  Selector selector_;
  const SweepSpace& space_;
  SweepResult& result_;
  const SweepHooks& hooks_;
  SweepArch out_;
  std::vector<std::int64_t> wins_;
};

}  // namespace

SweepResult sweep(const std::vector<BackendPtr>& backends, const SweepSpace& space, const SweepHooks& hooks) {
  SweepResult result;
  result.space = space;
  std::size_t blocks_per_arch = 0;
  for (DType kv : space.kv_dtypes) blocks_per_arch += q_dtypes_for(space, kv).size() * space.helix.size();
  const std::size_t blocks_total = std::max<std::size_t>(1, blocks_per_arch * space.archs.size());
  for (std::size_t a = 0; a < space.archs.size(); ++a) {
    ArchSweep arch_sweep(backends, space, space.archs[a], result, hooks);
    if (result.backends.empty()) {
      const Selector ordered(backends, Environment{}, PerfTable{});
      for (const BackendPtr& b : ordered.backends()) result.backends.emplace_back(b->name());
    }
    result.archs.push_back(arch_sweep.run(a * blocks_per_arch, blocks_total));
  }
  return result;
}

namespace {

constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                                    "#edc948", "#9c755f", "#ff9da7", "#bab0ac"};
constexpr const char* kUnroutableColour = "#111111";
constexpr const char* kFailsAtRunColour = "#d62728";

const char* colour_of(std::int16_t value) {
  if (value == SweepPanel::kUnroutable) return kUnroutableColour;
  if (value == SweepPanel::kFailsAtRun) return kFailsAtRunColour;
  return kPalette[static_cast<std::size_t>(value) % std::size(kPalette)];
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string sweep_svg(const SweepResult& result, const SweepArch& arch) {
  const auto& heads = result.space.heads;
  const auto& pages = result.space.page_sizes;
  constexpr int cell_w = 4, cell_h = 14, left = 44, top = 44, gap_x = 30, gap_y = 56, columns = 3;
  const int panel_w = static_cast<int>(heads.size()) * cell_w;
  const int panel_h = static_cast<int>(pages.size()) * cell_h;
  const int rows = static_cast<int>((arch.panels.size() + columns - 1) / columns);
  const int legend_h = 30;
  const int width = left + columns * (panel_w + gap_x) + 10;
  const int height = top + std::max(rows, 1) * (panel_h + gap_y) + legend_h;

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"15\">{}: chosen backend by heads (x) and page size (y), "
      "generation phase, {} generation(s)</text>\n",
      width, height, left, to_string(arch.arch), result.space.generations);

  for (std::size_t p = 0; p < arch.panels.size(); ++p) {
    const SweepPanel& panel = arch.panels[p];
    const int x0 = left + static_cast<int>(p % columns) * (panel_w + gap_x);
    const int y0 = top + static_cast<int>(p / columns) * (panel_h + gap_y);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">{}</text>\n", x0, y0 - 6, escape(panel.title));
    for (std::size_t pi = 0; pi < pages.size(); ++pi) {
      const int y = y0 + static_cast<int>(pages.size() - 1 - pi) * cell_h;
      if (p % columns == 0) {
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", x0 - 4, y + cell_h - 3,
                           pages[pi]);
      }
      // Runs of one colour become one rectangle, which keeps the file small.
      for (std::size_t hi = 0; hi < heads.size();) {
        const std::int16_t value = panel.cells[hi * pages.size() + pi];
        std::size_t end = hi;
        while (end < heads.size() && panel.cells[end * pages.size() + pi] == value) ++end;
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                           x0 + static_cast<int>(hi) * cell_w, y, static_cast<int>(end - hi) * cell_w, cell_h - 1,
                           colour_of(value));
        hi = end;
      }
    }
    for (std::size_t hi = 0; hi < heads.size(); ++hi) {
      if (heads[hi] == 1 || heads[hi] % 16 == 0) {
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                           x0 + static_cast<int>(hi) * cell_w + cell_w / 2, y0 + panel_h + 12, heads[hi]);
      }
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">heads</text>\n",
                       x0 + panel_w / 2, y0 + panel_h + 26);
  }

  int x = left;
  const int y = height - legend_h + 8;
  const auto legend = [&](const char* colour, const std::string& label) {
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", x, y, colour);
    svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", x + 16, y + 10, escape(label));
    x += 28 + static_cast<int>(label.size()) * 7;
  };
  for (std::size_t i = 0; i < result.backends.size(); ++i) legend(kPalette[i % std::size(kPalette)], result.backends[i]);
  legend(kUnroutableColour, "no backend can run it");
  legend(kFailsAtRunColour, "chosen, fails at run");
  svg += "</svg>\n";
  return svg;
}

}  // namespace helixmla

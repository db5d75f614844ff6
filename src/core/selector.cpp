#include "helixmla/selector.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>

#include "core/candidates.hpp"
#include "helixmla/error.hpp"

namespace helixmla {

Candidate assess(const Backend& backend, const PhaseShape& shape, const Environment& env) {
  Candidate candidate;
  candidate.backend = std::string(backend.name());
  const Verdict available = backend.available(env);
  if (!available) {
    candidate.reason = "not available: " + available.reason;
    return candidate;
  }
  candidate.available = true;
  const Verdict checked = backend.check(shape);
  if (!checked) {
    candidate.reason = "check: " + checked.reason;
    return candidate;
  }
  KernelVariant variant;
  const Verdict kernel = backend.catalog().can_implement(shape, env, &variant);
  if (!kernel) {
    candidate.reason = "no kernel: " + kernel.reason;
    return candidate;
  }
  candidate.capable = true;
  candidate.kernel = variant.name;
  const auto add = [&](std::string_view part) {
    if (!candidate.reason.empty()) candidate.reason += "; ";
    candidate.reason += part;
  };
  if (!checked.reason.empty()) add(checked.reason);
  // A catalog that names no variant still has the final word; its note says why.
  if (!variant.name.empty()) {
    add("kernel " + variant.name + (variant.precompiled ? " (precompiled)" : " (JIT)"));
  }
  if (!kernel.reason.empty() && kernel.reason != variant.name) add(kernel.reason);
  return candidate;
}

std::vector<Candidate> assess_all(const std::vector<BackendPtr>& backends, const PhaseShape& shape,
                                  const Environment& env) {
  std::vector<Candidate> candidates;
  candidates.reserve(backends.size());
  for (const BackendPtr& backend : backends) candidates.push_back(assess(*backend, shape, env));
  return candidates;
}

namespace {

std::string reasons_by_backend(const std::vector<Candidate>& candidates) {
  std::string text;
  for (const Candidate& c : candidates) text += fmt::format("\n  {}: {}", c.backend, c.reason);
  return text;
}

std::string known_names(const std::vector<BackendPtr>& backends) {
  std::string text;
  for (const BackendPtr& b : backends) text += (text.empty() ? "" : ", ") + std::string(b->name());
  return text;
}

}  // namespace

std::string Decision::trace() const {
  std::size_t width = 0;
  for (const Candidate& c : candidates) width = std::max(width, c.backend.size());
  std::string text = "shape: " + describe(shape) + "\n";
  for (const Candidate& c : candidates) {
    const std::string_view verdict = c.capable ? "capable" : (c.available ? "rejected" : "unavailable");
    text += fmt::format("  {:<{}}  {:<11}  {}", c.backend, width, verdict, c.reason);
    if (c.measured_us) text += fmt::format(" [measured {:.2f} us]", *c.measured_us);
    text += "\n";
  }
  text += choice.empty() ? "choice: none\n" : fmt::format("choice: {} (rule: {})\n", choice, rule);
  return text;
}

struct Selector::Cache {
  struct Key {
    PhaseShape shape;
    std::string forced;
  };
  struct KeyView {
    const PhaseShape& shape;
    std::string_view forced;
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(const KeyView& k) const {
      return k.forced.empty() ? hash_value(k.shape)
                              : hash_value(k.shape) ^ std::hash<std::string_view>{}(k.forced);
    }
    std::size_t operator()(const Key& k) const { return (*this)(KeyView{k.shape, k.forced}); }
  };
  struct Equal {
    using is_transparent = void;
    static KeyView view(const Key& k) { return {k.shape, k.forced}; }
    static KeyView view(const KeyView& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const KeyView x = view(a), y = view(b);
      return x.forced == y.forced && x.shape == y.shape;
    }
  };

  std::shared_mutex mutex;
  std::unordered_map<Key, Decision, Hash, Equal> decisions;
};

Selector::Selector(std::vector<BackendPtr> backends, Environment env, PerfTable table)
    : backends_(std::move(backends)),
      env_(std::move(env)),
      table_(std::move(table)),
      cache_(std::make_shared<Cache>()) {
  for (std::size_t i = 0; i < backends_.size(); ++i) {
    if (!backends_[i]) throw InvalidArgument("backends", static_cast<std::int64_t>(i), "null", "must be a backend");
    for (std::size_t j = 0; j < i; ++j) {
      if (backends_[j]->name() == backends_[i]->name()) {
        throw InvalidArgument("backends", static_cast<std::int64_t>(i), std::string(backends_[i]->name()),
                              "backend names must be unique");
      }
    }
  }
  // Priority order is also the order every trace lists; names break ties so
  // the order never depends on how the caller listed the backends.
  std::stable_sort(backends_.begin(), backends_.end(), [](const BackendPtr& a, const BackendPtr& b) {
    if (a->priority() != b->priority()) return a->priority() > b->priority();
    return a->name() < b->name();
  });
}

Decision Selector::select_uncached(const PhaseShape& shape, const std::string& forced) const {
  Decision decision;
  decision.shape = shape;
  decision.candidates = assess_all(backends_, shape, env_);
  std::vector<Candidate>& candidates = decision.candidates;

  if (!forced.empty()) {
    const auto it = std::find_if(candidates.begin(), candidates.end(),
                                 [&](const Candidate& c) { return c.backend == forced; });
    if (it == candidates.end()) {
      throw NoCapableBackend(fmt::format("backend {} was forced but is not known; known backends: {}", forced,
                                         known_names(backends_)));
    }
    if (!it->capable) {
      throw NoCapableBackend(fmt::format("backend {} was forced but cannot run {}: {}", forced, describe(shape),
                                         it->reason));
    }
    decision.choice = forced;
    decision.backend = backends_[static_cast<std::size_t>(it - candidates.begin())];
    decision.rule = "forced";
    return decision;
  }

  std::size_t chosen = candidates.size();
  for (std::size_t i = 0; i < candidates.size() && chosen == candidates.size(); ++i) {
    if (candidates[i].capable) chosen = i;
  }
  if (chosen == candidates.size()) {
    throw NoCapableBackend(
        fmt::format("no backend can run {}:{}", describe(shape), reasons_by_backend(candidates)));
  }
  decision.rule = "priority";

  if (!table_.empty()) {
    const PerfKey key = PerfKey::of(shape, env_.arch);
    if (const PerfTable::Times* times = table_.find(key)) {
      std::optional<std::size_t> fastest;
      bool tied = false;
      std::string unmeasured;
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const auto it = times->find(candidates[i].backend);
        if (it == times->end()) {
          if (candidates[i].capable) unmeasured += (unmeasured.empty() ? "" : ", ") + candidates[i].backend;
          continue;
        }
        candidates[i].measured_us = it->second;
        // A measurement never makes a backend capable: only capable ones compete.
        if (!candidates[i].capable) continue;
        if (!fastest || it->second < *candidates[*fastest].measured_us) {
          fastest = i;
          tied = false;
        } else if (it->second == *candidates[*fastest].measured_us) {
          tied = true;  // the earlier, higher-priority one stays
        }
      }
      // A table made by another build, or before a kernel existed, may lack a
      // capable backend; nothing says that one is slower, so the table
      // decides only when it compares every capable backend.
      if (fastest && !unmeasured.empty()) {
        decision.rule = fmt::format("priority: {} has no time for capable {}", key.describe(), unmeasured);
      } else if (fastest) {
        chosen = *fastest;
        decision.rule = "measured: " + key.describe() + (tied ? " (equal times: priority breaks the tie)" : "");
      }
    }
  }
  decision.choice = candidates[chosen].backend;
  decision.backend = backends_[chosen];
  return decision;
}

const Decision& Selector::select(const PhaseShape& shape, const std::string& forced) const {
  const Cache::KeyView view{shape, forced};
  {
    std::shared_lock lock(cache_->mutex);
    const auto it = cache_->decisions.find(view);
    if (it != cache_->decisions.end()) return it->second;
  }
  Decision decision = select_uncached(shape, forced);
  std::unique_lock lock(cache_->mutex);
  // Another thread may have inserted the same key meanwhile; keep the first.
  return cache_->decisions.try_emplace(Cache::Key{shape, forced}, std::move(decision)).first->second;
}

}  // namespace helixmla

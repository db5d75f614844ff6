// A kernel catalog for test backends that run any shape on the host: one
// variant, "host_f64", which every shape gets.
#pragma once

#include <vector>

#include "helixmla/backend.hpp"

namespace helixmla::testing {

class AnyShapeCatalog final : public KernelCatalog {
 public:
  std::vector<KernelVariant> inventory(const Environment&) const override { return {{"host_f64", true}}; }
  Verdict can_implement(const PhaseShape&, const Environment&, KernelVariant* chosen) const override {
    if (chosen) *chosen = {"host_f64", true};
    return Verdict::yes();
  }
};

}  // namespace helixmla::testing

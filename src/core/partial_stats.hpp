// What a merge of partial attentions does with one partial's softmax
// statistics (m, l): the split-KV combine and the Helix combine, host and
// device, apply the same rule, so a row's result cannot depend on how its KV
// was cut.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define HELIXMLA_HOST_DEVICE __host__ __device__
#else
#define HELIXMLA_HOST_DEVICE
#endif

namespace helixmla {

enum class PartialRole {
  skipped,  // saw nothing (l = 0; m and o may hold any bits), or its logits
            // all lie below float32's range (m = -inf): weight 0
  merged,   // l > 0 and m finite: weight l e^(m - M)
  poisons,  // anything else (l NaN or negative, m NaN or +inf): NaN input
            // reached this partial, and the merged row must show it as NaN
            // rather than drop the partial and return a finite answer
};

HELIXMLA_HOST_DEVICE inline PartialRole partial_role(float m, float l) {
  if (l == 0.0f) return PartialRole::skipped;
  if (!(l > 0.0f) || !(m < INFINITY) || m != m) return PartialRole::poisons;
  return m == -INFINITY ? PartialRole::skipped : PartialRole::merged;
}

}  // namespace helixmla

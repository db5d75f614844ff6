// Backends described as data (DESIGN §4): a profile replays another system's
// routing (which libraries it tries, in which order, what each admits and
// which kernels each has) without its kernels. Profile backends can be
// selected by `explain` and `sweep` but never executed.
//
// Schema (version 1), every field checked; errors name the JSON field:
//
//   { "version": 1, "name": "...", "description": "...",
//     "scope": { "archs": ["sm100", ...], "phases": ["generation"] },
//     "backends": [ {
//       "name": "...", "priority": 300, "description": "...",
//       "archs": ["sm100", "sm103"],           // available only there
//       "admission": [ STEP, ... ],             // check(), in order
//       "kernels": { "lookup": "at_selection" | "at_run",
//                    "families": [ FAMILY, ... ], "none": "reason" } } ] }
//
//   STEP, one of (each with an optional "reason" shown when it decides):
//     { "require": COND }          the shape must satisfy COND, else reject
//     { "admit": COND }            correctness admission: when COND holds the
//                                  shape is admitted and later performance
//                                  gates are skipped (later requires still apply)
//     { "performance_gate": [ { "when": COND, "require": COND }
//                           | { "when": COND, "min_batch": [ {"heads": H, "q_len": Q,
//                                                            "min_batch": B}, ... ] } ] }
//                                  the first rule whose "when" holds decides;
//                                  no rule, or a missing (H, q_len) key, rejects;
//                                  B must be a power of two (shapes carry only
//                                  the power-of-two batch bucket)
//   COND: { FIELD: MATCH, ..., "any_of": [COND, ...], "not": COND } (all must hold)
//     FIELD: phase, heads, q_len, max_q_len, page_size, kv_dtype, q_dtype,
//            out_dtype, kv_lora_rank, rope_dim, batch_bucket,
//            batch_has_generations, helix, cp_size, has_stats,
//            stats_fp32_contiguous, beam_width, mask, on_device,
//            kv_dtype_is_q_dtype
//     MATCH: a value, a list of values, or {"min": a, "max": b} (inclusive)
//   FAMILY (the first whose "when" holds is the kernel choice):
//     { "name": "...", "when": COND, "tile_q": 64,
//       "precompiled_page_sizes": [32], "jit_page_sizes": "any" | [..],
//       "missing": "text", "invalid": "text" }
//     "invalid" marks a configuration the kernel cannot take at all;
//     "missing" is the error for a page size neither precompiled nor JIT-able;
//     both may use {heads}, {q_len}, {page_size}, {tile_q}.
//
// Kernel lookup "at_run" replays a system that chose a backend by its
// admission alone and looked its kernel up only when the call ran: such a
// backend counts as capable, and when its lookup would fail the candidate's
// reason starts with kFailsAtRun and carries the error the run would raise.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "helixmla/backend.hpp"
#include "helixmla/selector.hpp"

namespace helixmla {

struct Profile {
  std::string name;
  std::string description;
  std::string origin;                // file it was read from
  std::vector<Arch> archs;           // architectures the described system targets
  std::vector<PhaseKind> phases;     // phases its backends are meant for
  std::vector<BackendPtr> backends;  // profile-only: executable() is false
};

inline constexpr std::string_view kFailsAtRun = "fails at run: ";

// True when the candidate was admitted by a backend whose kernel lookup is
// deferred to run time and that lookup fails.
bool fails_at_run(const Candidate& candidate);

// `origin` names the text in errors (a file name, or "<inline>").
Profile parse_profile(const std::string& json_text, const std::string& origin = "<inline>");
Profile load_profile_file(const std::string& path);
// A path (contains '/' or ends in .json) is read as is; a name resolves to
// <name>.json in the first of profile_search_dirs() that has it.
Profile load_profile(const std::string& name_or_path);
// $HELIXMLA_PROFILE_DIR (when set), <source tree>/profiles, <datadir>/helixmla/profiles.
std::vector<std::string> profile_search_dirs();

}  // namespace helixmla

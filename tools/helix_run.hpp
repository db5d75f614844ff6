// `helixmla run --cp N [--devices ...]`: one Helix step of a synthetic batch,
// checked against the non-Helix float64 result, with attention, exchange and
// combine timed separately.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "problem_flags.hpp"

namespace helixmla::tools {

struct HelixRunOptions {
  int repeat = 1;        // timed steps; the median of each phase is reported
  bool graphs = true;    // on a GPU: also time whole-step CUDA graph replays
  bool baseline = true;  // on a GPU: also time the whole batch without Helix on one GPU
  std::string exchange = "auto";  // with several --devices: auto, nccl or peer
};

// Adds --no-graphs, --no-baseline and --exchange (`run` already owns --repeat).
void add_helix_flags(CLI::App& command, HelixRunOptions& options);

// Devices: none -> every rank in process on GPU 0 when there is one (the CPU
// when not, or with --backend cpu); one -> every rank in process on that GPU;
// cp of them -> rank r on devices[r], exchanging through direct stores
// between the GPUs when every pair has peer access (--exchange auto, the
// default, or peer), else through NCCL (auto, or nccl). Returns 0 when the result
// matches the reference, 1 when it does not.
int run_helix_command(const ProblemFlags& flags, int cp, const std::vector<int>& devices, bool json,
                      const HelixRunOptions& options = {});

}  // namespace helixmla::tools

// Runs one Helix step for cp ranks: per rank the local problem
// (helix_localize), attention through a helixmla::Runtime, the all-to-all over
// heads and the combine, timing each phase.
//
// Modes:
// - host:   every rank in this process on the CPU (host tensors, the
//           in-process exchange); phases run rank after rank.
// - device: every rank in this process on one GPU (devices[0], default 0),
//           one stream, the in-process exchange; phase times are the sum
//           over ranks, as one GPU executes them one after another.
// - nccl:   rank r on devices[r], one stream per GPU, the NCCL exchange;
//           phase times are the maximum over ranks.
// - peer:   as nccl, with the peer exchange (GPUs of this process writing
//           into each other's memory; dist/peer_exchange.hpp).
//
// Every request is distributed by pages, contexts included (the bounds carry
// their causal mask), so a mixed batch needs no special case.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/exchange.hpp"
#include "helixmla/problem.hpp"
#include "helixmla/runtime.hpp"

namespace helixmla::dist {

enum class HelixMode : std::uint8_t { host, device, nccl, peer };

struct HelixDriverOptions {
  std::int32_t cp = 2;
  HelixMode mode = HelixMode::host;
  std::vector<int> devices;  // device: {gpu} (default {0}); nccl, peer: one GPU per rank
  RuntimeOptions runtime;    // per rank; the environment's device is set per rank
};

// Microseconds of one step.
struct HelixStepTimes {
  double attention_us = 0.0;
  double exchange_us = 0.0;  // packing the attention output included
  double combine_us = 0.0;
  double total_us = 0.0;
};

class HelixDriver {
 public:
  // `global` is an ordinary batch in host memory. In host mode its tensors
  // are used in place and must outlive the driver; device modes copy them.
  HelixDriver(const Problem& global, HelixDriverOptions options);
  ~HelixDriver();
  HelixDriver(const HelixDriver&) = delete;
  HelixDriver& operator=(const HelixDriver&) = delete;

  // Runs one step and waits for it (bounded by the exchange's timeout).
  HelixStepTimes step();

  // Device modes: captures one whole step (attention, exchange, combine of
  // every rank) into CUDA graphs on first use, and each phase alone, and
  // times one replay of the step (launch latency and, across GPUs, the skew
  // of launching one GPU after the other included).
  // Returns nullopt with the reason in `why_not` when capture is impossible.
  std::optional<double> graph_step_us(std::string* why_not);

  // Device modes: the mean time per replay when `replays` replays of the
  // step graph, then of each phase's graph, are queued back to back on every
  // GPU, as in an engine that replays whole decode steps: what the GPUs take,
  // without host launch latency or skew.
  std::optional<HelixStepTimes> graph_steady_times(int replays, std::string* why_not);

  // Fills the combined outputs, and the receive buffers the combine reads,
  // with NaN, so a step that writes nothing, or combines before its
  // partials have arrived, shows.
  void poison_outputs();

  // The combined result of the last step: out [tokens, H, kv_lora_rank] of
  // the batch's out dtype, and stats [tokens, H, 2] = (m, l) when not null.
  void fetch_output(void* out, float* stats) const;

  // The backends rank 0's runtime chose, as describe_choices writes them.
  std::string backends() const;
  std::string exchange_name() const;
  HelixMode mode() const { return options_.mode; }

 private:
  struct Rank;
  struct Graphs;
  enum class StepPhase : std::uint8_t { attention, exchange, combine };
  static void select_device(const Rank& rank);
  void enqueue_phase(StepPhase phase);
  // Captures graph set `set` (0: step, 1 + phase) on first use.
  bool ensure_graphs(std::size_t set, std::string* why_not);
  // Mean microseconds per replay of graph set `set` (0: step, 1 + phase),
  // slowest stream.
  double replay_us(std::size_t set, int replays);
  // Launches (device) or runs (host) every phase of every rank; marks the
  // phase boundaries with CUDA events or, for the host, clock reads.
  void enqueue_step(bool record_events,
                    std::array<std::chrono::steady_clock::time_point, 4>* host_marks);

  HelixDriverOptions options_;
  Problem global_;
  ExchangeShape shape_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace helixmla::dist

// Whole Helix steps checked the same way whatever runs the ranks (host, one
// GPU, NCCL): the batch of a case, and the step's output and statistics
// against the float64 attention of the unsplit batch. Here rather than in
// testing/ because it asserts with GoogleTest, which the command-line program
// and the benchmarks do not link.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dist/helix_driver.hpp"
#include "naive_attention.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::testing {

// One step's batch and the number of ranks it is split over. The defaults
// (narrow dims, 32-token pages) keep host steps cheap; GPU tests widen them.
struct HelixStepCase {
  std::string name;
  std::int32_t cp = 2;
  std::int32_t heads = 16;
  std::int32_t generations = 3;
  std::int32_t q_len = 1;
  std::vector<std::int32_t> kv_len = {70};
  std::int32_t contexts = 0;
  std::int32_t context_len = 40;
  std::int32_t page_size = 32;
  DType kv_dtype = DType::bf16;
  MlaDims dims{64, 16};
};

void PrintTo(const HelixStepCase& c, std::ostream* os);

// Q in default_q_dtype of the KV dtype; fp8 KV stored with scale 1/64.
BatchSpec batch_spec_of(const HelixStepCase& c, std::uint64_t seed);

struct HelixStepTolerance {
  double out_rel_l2;
  double stats;  // m within stats * (1 + |m|), l within stats * l
};

struct HelixStepResult {
  dist::HelixStepTimes times;
  NaiveResult expected;  // of the unsplit batch, for checking later replays of the step
};

// Runs one step of `driver` over `batch` on NaN-poisoned outputs, fetches the
// output and statistics into NaN-filled host buffers and compares them with
// the reference. The first statistic out of tolerance is a fatal failure that
// ends the comparison; a caller that goes on afterwards checks
// HasFatalFailure().
HelixStepResult expect_helix_step_matches(dist::HelixDriver& driver, SyntheticBatch& batch, const std::string& label,
                                          const HelixStepTolerance& tolerance);

// The comparison of expect_helix_step_matches alone, of whatever `driver`
// ran last (a graph replay of the step, after poison_outputs): its output
// and statistics, fetched into NaN-filled host buffers, against `expected`.
void expect_fetched_step_matches(const dist::HelixDriver& driver, SyntheticBatch& batch, const NaiveResult& expected,
                                 const std::string& label, const HelixStepTolerance& tolerance);

}  // namespace helixmla::testing

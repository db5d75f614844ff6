// The generic kernel's work plan on the host: split counts kept for a
// refreshed run (the plan itself is exercised by the GPU parity tests).
#if defined(HELIXMLA_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/block_schedule.hpp"
#include "cuda/generic_work_plan.hpp"
#include "support/plan_checks.hpp"
#include "synthetic_batch.hpp"

namespace helixmla::cuda {
namespace {

constexpr int kSms = 132;

testing::BatchSpec decode_metadata(std::vector<std::int32_t> kv_len) {
  testing::BatchSpec spec;
  spec.heads = 24;
  spec.generations = static_cast<std::int32_t>(kv_len.size());
  spec.q_len = 2;
  spec.kv_len = std::move(kv_len);
  spec.allocate_tensors = false;
  return spec;
}

// Every row group's items tile [0, the KV its last row sees) without gaps
// or overlap (q_len 2: a request's second token sees one position more).
void expect_plan_covers(const Problem& p, const GenericWorkPlan& plan) {
  std::map<std::int64_t, std::vector<std::pair<int, int>>> ranges;  // by first output row
  std::map<std::int64_t, std::int32_t> rows;
  for (const GenericWorkItem& item : plan.items) {
    EXPECT_LE(item.kv_begin, item.kv_end);
    ranges[item.out_row].emplace_back(item.kv_begin, item.kv_end);
    rows[item.out_row] = item.rows;
  }
  for (auto& [row, parts] : ranges) {
    std::sort(parts.begin(), parts.end());
    EXPECT_EQ(parts.front().first, 0) << row;
    for (std::size_t i = 1; i < parts.size(); ++i) EXPECT_EQ(parts[i].first, parts[i - 1].second) << row;
    const std::int64_t last_row = row + rows[row] - 1;
    const auto request = static_cast<std::size_t>(last_row / (2 * p.num_heads));
    const auto token = static_cast<std::int32_t>(last_row / p.num_heads % 2);
    EXPECT_EQ(parts.back().second, visible_kv(p.kv_len[request], 2, token)) << row;
  }
}

struct KeptStep {
  explicit KeptStep(std::vector<std::int32_t> next_kv_len)
      : step(decode_metadata({20001, 130, 301})),
        next(decode_metadata(std::move(next_kv_len))),
        next_problem(next.problem()),
        prepared(plan_generic_work(step.problem(), kSms)),
        best(plan_generic_work(next_problem, kSms)),
        kept(plan_generic_work_keeping_splits(next_problem, prepared)) {}
  testing::SyntheticBatch step, next;
  Problem next_problem;
  GenericWorkPlan prepared, best;
  std::optional<GenericWorkPlan> kept;
};

TEST(GenericWorkPlan, KeptSplitCountsPlanAnotherStepOnThePreparedGrid) {
  const KeptStep s({19969, 131, 302});
  ASSERT_NE(s.best.group_splits, s.prepared.group_splits) << "the step's own plan launches alike";
  ASSERT_TRUE(s.kept);
  EXPECT_EQ(s.kept->group_splits, s.prepared.group_splits);
  EXPECT_EQ(s.kept->items.size(), s.prepared.items.size());
  EXPECT_EQ(s.kept->segments.size(), s.prepared.segments.size());
  EXPECT_EQ(s.kept->entries, s.prepared.entries);
  EXPECT_EQ(s.kept->wide_split_rows, s.prepared.wide_split_rows);
  expect_plan_covers(s.next_problem, *s.kept);
  EXPECT_TRUE(keeping_splits_pays(estimated_finish(*s.kept, kSms), estimated_finish(s.best, kSms)));
}

TEST(GenericWorkPlan, KeptSplitsFollowTheLongestRequestToItsSlot) {
  const KeptStep s({130, 20001, 301});
  ASSERT_TRUE(s.kept);
  EXPECT_EQ(s.kept->items.size(), s.prepared.items.size());
  EXPECT_EQ(s.kept->entries, s.prepared.entries);
  expect_plan_covers(s.next_problem, *s.kept);
  EXPECT_EQ(estimated_finish(*s.kept, kSms), estimated_finish(s.best, kSms));
}

// The long request replaced by a short one: its splits go to the now
// longest request, whose four KV tiles leave most of them empty.
TEST(GenericWorkPlan, KeptSplitsPastAShortRequestAreEmpty) {
  const KeptStep s({100, 130, 301});
  ASSERT_TRUE(s.kept);
  EXPECT_EQ(s.kept->items.size(), s.prepared.items.size());
  expect_plan_covers(s.next_problem, *s.kept);
  EXPECT_GT(testing::empty_items_of(s.kept->items, 2), 50);
}

TEST(GenericWorkPlan, KeptSplitsAreNotWorthALongRequestInAnUnsplitSlot) {
  const KeptStep s({20001, 130, 19000});
  ASSERT_TRUE(s.kept);
  EXPECT_FALSE(keeping_splits_pays(estimated_finish(*s.kept, kSms), estimated_finish(s.best, kSms)));
}

TEST(GenericWorkPlan, SplitCountsAreKeptOnlyForTheSameRowGroups) {
  EXPECT_FALSE(KeptStep({20001, 130}).kept);
}

}  // namespace
}  // namespace helixmla::cuda

#endif  // HELIXMLA_WITH_CUDA

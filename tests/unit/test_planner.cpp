// The planner's parts must be views of their own requests: a generation part
// that kept the context rows' offsets would silently attend to the wrong KV.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "helixmla/planner.hpp"
#include "helixmla/reference.hpp"
#include "helixmla/validate.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }

testing::BatchSpec mixed_spec() {
  testing::BatchSpec s;
  s.dims = {64, 16};
  s.heads = 3;
  s.contexts = 2;
  s.context_len = 5;
  s.generations = 3;
  s.q_len = 2;
  s.kv_len = {33, 47, 61};  // distinct per generation
  s.page_size = 8;          // every request has its own shuffled pages
  s.stats = true;
  s.seed = 7;
  return s;
}

// Per-token Helix bounds, distinct across the generation tokens.
std::vector<std::int32_t> distinct_bounds(const Problem& p) {
  std::vector<std::int32_t> bounds;
  for (std::int32_t r = 0; r < p.num_requests(); ++r) {
    for (std::int32_t t = 0; t < p.q_len[r]; ++t) {
      const auto visible = static_cast<std::int32_t>(visible_kv(p.kv_len[r], p.q_len[r], t));
      bounds.push_back(t % 2 == 0 && visible > 0 ? visible - 1 : visible);
    }
  }
  return bounds;
}

void expect_same_span(std::span<const std::int32_t> part, std::span<const std::int32_t> whole,
                      std::size_t offset, std::size_t count, const char* what) {
  ASSERT_EQ(part.size(), count) << what;
  EXPECT_EQ(part.data(), whole.data() + offset) << what;
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(part[i], whole[offset + i]) << what << " " << i;
}

TEST(Planner, GenerationPartIsGenerationRelative) {
  testing::SyntheticBatch batch(mixed_spec());
  Problem whole = batch.problem();
  const std::vector<std::int32_t> bounds = distinct_bounds(whole);
  whole.helix.token_kv_bounds = bounds;
  ASSERT_NO_THROW(validate(whole));

  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.generation.has_value());
  const Phase& gen = *plan.generation;
  const Problem& g = gen.problem;
  const std::int64_t heads = whole.num_heads;
  const std::size_t stride = static_cast<std::size_t>(whole.page_table_stride);

  EXPECT_EQ(gen.kind, PhaseKind::generation);
  EXPECT_EQ(gen.first_request, 2);
  EXPECT_EQ(gen.first_token, 10);
  EXPECT_EQ(g.num_contexts, 0);
  EXPECT_EQ(g.num_requests(), 3);
  EXPECT_EQ(g.num_tokens(), 6);

  EXPECT_EQ(bytes(g.q), bytes(whole.q) + 10 * heads * 80 * 2);
  EXPECT_EQ(bytes(g.out), bytes(whole.out) + 10 * heads * 64 * 2);
  EXPECT_EQ(g.stats.data, whole.stats.data + 10 * heads * 2);
  EXPECT_EQ(g.stats.tokens, 6);
  EXPECT_EQ(g.stats.heads, whole.stats.heads);

  expect_same_span(g.q_len, whole.q_len, 2, 3, "q_len");
  expect_same_span(g.kv_len, whole.kv_len, 2, 3, "kv_len");
  EXPECT_EQ(g.kv_len[0], 33);
  EXPECT_EQ(g.kv_len[2], 61);
  expect_same_span(g.page_table, whole.page_table, 2 * stride, 3 * stride, "page_table");
  expect_same_span(g.helix.token_kv_bounds, whole.helix.token_kv_bounds, 10, 6, "bounds");
  EXPECT_EQ(g.helix.token_kv_bounds[0], 31);  // request 2, token 0 sees 32, less one
  EXPECT_EQ(g.helix.token_kv_bounds[5], 61);

  // Everything else is the whole batch's.
  EXPECT_EQ(g.kv.pool, whole.kv.pool);
  EXPECT_EQ(g.kv.num_pages, whole.kv.num_pages);
  EXPECT_EQ(g.page_table_stride, whole.page_table_stride);
  EXPECT_EQ(g.num_heads, whole.num_heads);
  EXPECT_NO_THROW(validate(g));
}

TEST(Planner, ContextPartCoversTheContexts) {
  testing::SyntheticBatch batch(mixed_spec());
  Problem whole = batch.problem();
  const std::vector<std::int32_t> bounds = distinct_bounds(whole);
  whole.helix.token_kv_bounds = bounds;

  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.context.has_value());
  const Problem& c = plan.context->problem;
  EXPECT_EQ(plan.context->kind, PhaseKind::context);
  EXPECT_EQ(plan.context->first_request, 0);
  EXPECT_EQ(plan.context->first_token, 0);
  EXPECT_EQ(c.num_contexts, 2);
  EXPECT_EQ(c.num_generations(), 0);
  EXPECT_EQ(c.q, whole.q);
  EXPECT_EQ(c.out, whole.out);
  EXPECT_EQ(c.stats.data, whole.stats.data);
  EXPECT_EQ(c.stats.tokens, 10);
  expect_same_span(c.q_len, whole.q_len, 0, 2, "q_len");
  expect_same_span(c.kv_len, whole.kv_len, 0, 2, "kv_len");
  expect_same_span(c.page_table, whole.page_table, 0, 2 * whole.page_table_stride, "page_table");
  expect_same_span(c.helix.token_kv_bounds, whole.helix.token_kv_bounds, 0, 10, "bounds");
  EXPECT_NO_THROW(validate(c));
}

// Computing the parts separately must write exactly what the whole batch writes.
TEST(Planner, PartsComputeTheWholeBatch) {
  testing::SyntheticBatch batch(mixed_spec());
  const Problem whole = batch.problem();
  reference_attention(whole, 2);
  const std::vector<std::byte> whole_out = batch.out_;
  const std::vector<float> whole_stats = batch.stats_;

  batch.poison_outputs();
  const PhasePlan plan = plan_phases(whole);
  ASSERT_TRUE(plan.context && plan.generation);
  reference_attention(plan.generation->problem, 2);
  reference_attention(plan.context->problem, 1);
  EXPECT_EQ(std::memcmp(batch.out_.data(), whole_out.data(), whole_out.size()), 0);
  EXPECT_EQ(std::memcmp(batch.stats_.data(), whole_stats.data(), whole_stats.size() * sizeof(float)), 0);
}

TEST(Planner, BatchWithoutContexts) {
  testing::BatchSpec s = mixed_spec();
  s.contexts = 0;
  testing::SyntheticBatch batch(s);
  const Problem whole = batch.problem();
  const PhasePlan plan = plan_phases(whole);
  EXPECT_FALSE(plan.context.has_value());
  ASSERT_TRUE(plan.generation.has_value());
  const Problem& g = plan.generation->problem;
  EXPECT_EQ(plan.generation->first_request, 0);
  EXPECT_EQ(plan.generation->first_token, 0);
  EXPECT_EQ(g.q, whole.q);
  EXPECT_EQ(g.out, whole.out);
  EXPECT_EQ(g.stats.data, whole.stats.data);
  EXPECT_EQ(g.stats.tokens, 6);
  expect_same_span(g.kv_len, whole.kv_len, 0, 3, "kv_len");
  expect_same_span(g.page_table, whole.page_table, 0, whole.page_table.size(), "page_table");
}

TEST(Planner, BatchWithoutGenerations) {
  testing::BatchSpec s = mixed_spec();
  s.generations = 0;
  s.contexts = 3;
  testing::SyntheticBatch batch(s);
  const Problem whole = batch.problem();
  const PhasePlan plan = plan_phases(whole);
  EXPECT_FALSE(plan.generation.has_value());
  ASSERT_TRUE(plan.context.has_value());
  const Problem& c = plan.context->problem;
  EXPECT_EQ(c.num_contexts, 3);
  EXPECT_EQ(c.num_tokens(), 15);
  EXPECT_EQ(c.q, whole.q);
  EXPECT_EQ(c.stats.tokens, 15);
  expect_same_span(c.q_len, whole.q_len, 0, 3, "q_len");
}

TEST(Planner, MetadataOnlyProblemsKeepNullTensors) {
  testing::BatchSpec s = mixed_spec();
  s.allocate_tensors = false;
  s.stats = false;
  testing::SyntheticBatch batch(s);
  const PhasePlan plan = plan_phases(batch.problem());
  ASSERT_TRUE(plan.generation.has_value());
  EXPECT_EQ(plan.generation->problem.q, nullptr);
  EXPECT_EQ(plan.generation->problem.out, nullptr);
  EXPECT_EQ(plan.generation->problem.stats.data, nullptr);
  EXPECT_EQ(plan.generation->problem.stats.tokens, 0);
}

}  // namespace
}  // namespace helixmla

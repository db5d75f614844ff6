// Helix end to end on the CPU with in-process ranks: the exchange layout, and
// whole steps (local problems, attention through the runtime, all-to-all,
// combine) against the independent float64 attention of the unsplit batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compare.hpp"
#include "dist/exchange.hpp"
#include "dist/helix_driver.hpp"
#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"
#include "naive_attention.hpp"
#include "support/helix_step.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

using testing::HelixStepCase;

// A value that names where it came from.
float tag(std::int32_t source, std::int64_t token, std::int32_t head, std::int32_t k) {
  return static_cast<float>(source * 100000 + token * 1000 + head * 10 + k);
}

TEST(HelixExchange, InProcessHostDeliversEveryChunk) {
  for (std::int32_t cp : {1, 2, 3, 4, 8}) {
    for (std::int32_t heads : {7, 16, 24}) {
      const dist::ExchangeShape shape{cp, 3, heads, 4, DType::fp32};
      std::vector<std::vector<float>> partial(cp), stats(cp), send(cp), send_stats(cp), recv(cp), recv_stats(cp);
      std::vector<dist::RankBuffers> buffers;
      for (std::int32_t r = 0; r < cp; ++r) {
        for (std::int64_t t = 0; t < shape.tokens; ++t) {
          for (std::int32_t h = 0; h < heads; ++h) {
            for (std::int32_t k = 0; k < shape.width; ++k) partial[r].push_back(tag(r, t, h, k));
            stats[r].push_back(tag(r, t, h, 0) + 0.25f);
            stats[r].push_back(tag(r, t, h, 0) + 0.5f);
          }
        }
        send[r].assign(shape.send_partial_bytes() / 4, std::nanf(""));
        send_stats[r].assign(shape.send_stats_bytes() / 4, std::nanf(""));
        recv[r].assign(shape.recv_partial_bytes(r) / 4, std::nanf(""));
        recv_stats[r].assign(shape.recv_stats_bytes(r) / 4, std::nanf(""));
        buffers.push_back({r, partial[r].data(), stats[r].data(), send[r].data(), send_stats[r].data(),
                           recv[r].data(), recv_stats[r].data(), nullptr});
      }
      auto exchange = dist::make_in_process_exchange(cp, Location::host());
      exchange->all_to_all(shape, buffers);
      for (std::int32_t r = 0; r < cp; ++r) {
        const HeadRange mine = helix_heads_of_rank(heads, cp, r);
        std::size_t i = 0, j = 0;
        for (std::int32_t source = 0; source < cp; ++source) {
          for (std::int64_t t = 0; t < shape.tokens; ++t) {
            for (std::int32_t h = mine.begin; h < mine.end(); ++h) {
              for (std::int32_t k = 0; k < shape.width; ++k) {
                ASSERT_EQ(recv[r][i++], tag(source, t, h, k)) << "cp " << cp << " rank " << r;
              }
              ASSERT_EQ(recv_stats[r][j++], tag(source, t, h, 0) + 0.25f);
              ASSERT_EQ(recv_stats[r][j++], tag(source, t, h, 0) + 0.5f);
            }
          }
        }
        EXPECT_EQ(i, recv[r].size());
      }
    }
  }
}

TEST(HelixExchange, InProcessNeedsEveryRank) {
  const dist::ExchangeShape shape{2, 1, 2, 4, DType::fp32};
  std::vector<float> a(8), b(4), c(8), d(4), e(8), f(4);
  const std::vector<dist::RankBuffers> only_rank0 = {
      {0, a.data(), b.data(), c.data(), d.data(), e.data(), f.data(), nullptr}};
  auto exchange = dist::make_in_process_exchange(2, Location::host());
  EXPECT_THROW(exchange->all_to_all(shape, only_rank0), InvalidArgument);
}

class HelixInProcess : public ::testing::TestWithParam<HelixStepCase> {};

TEST_P(HelixInProcess, MatchesTheUnsplitReference) {
  const HelixStepCase& c = GetParam();
  testing::SyntheticBatch batch(testing::batch_spec_of(c, 0x4e11 + c.cp * 131 + c.heads));
  const Problem global = batch.problem();

  dist::HelixDriverOptions options;
  options.cp = c.cp;
  options.mode = dist::HelixMode::host;
  dist::HelixDriver driver(global, options);
  // Partials and the result are each rounded once to bf16/fp16.
  const testing::HelixStepResult step =
      testing::expect_helix_step_matches(driver, batch, c.name, {.out_rel_l2 = 6e-3, .stats = 1e-5});
  EXPECT_GE(step.times.total_us, step.times.attention_us);
}

std::vector<HelixStepCase> decode_cases() {
  std::vector<HelixStepCase> cases;
  for (std::int32_t cp : {1, 2, 3, 4, 8}) {
    for (std::int32_t heads : {16, 24, 48, 96, 128}) {
      HelixStepCase c;
      c.name = "decode_cp" + std::to_string(cp) + "_h" + std::to_string(heads);
      c.cp = cp;
      c.heads = heads;
      c.kv_len = {70, 200, 5};  // the 5-token request leaves cp-1 ranks empty
      c.page_size = heads % 3 == 0 ? 64 : 32;
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<HelixStepCase> verify_cases() {
  std::vector<HelixStepCase> cases;
  for (std::int32_t cp : {2, 3, 4, 8}) {
    for (std::int32_t page : {1, 32, 64}) {
      for (std::int32_t q_len : {2, 3, 4}) {
        HelixStepCase c;
        c.name = "verify_cp" + std::to_string(cp) + "_page" + std::to_string(page) + "_q" + std::to_string(q_len);
        c.cp = cp;
        c.heads = 24;
        c.q_len = q_len;
        c.page_size = page;
        // Every group straddles a page boundary: kv_len - q_len < k*page < kv_len.
        c.kv_len = page == 1 ? std::vector<std::int32_t>{9, 40} : std::vector<std::int32_t>{page + 1, 2 * page + 2};
        cases.push_back(c);
      }
    }
  }
  return cases;
}

std::vector<HelixStepCase> other_cases() {
  std::vector<HelixStepCase> cases;
  for (std::int32_t cp : {2, 3, 8}) {
    HelixStepCase mixed;
    mixed.name = "mixed_cp" + std::to_string(cp);
    mixed.cp = cp;
    mixed.heads = 48;
    mixed.contexts = 2;
    mixed.context_len = 45;
    mixed.q_len = 3;
    mixed.kv_len = {33, 100};
    cases.push_back(mixed);

    HelixStepCase fp8 = mixed;
    fp8.name = "fp8_verify_cp" + std::to_string(cp);
    fp8.contexts = 0;
    fp8.kv_dtype = DType::fp8_e4m3;
    fp8.page_size = 64;
    fp8.kv_len = {65, 130, 3};
    cases.push_back(fp8);

    HelixStepCase fp8_decode = fp8;
    fp8_decode.name = "fp8_decode_cp" + std::to_string(cp);
    fp8_decode.q_len = 1;
    fp8_decode.heads = 128;
    cases.push_back(fp8_decode);
  }
  HelixStepCase fp16;
  fp16.name = "fp16_cp4";
  fp16.cp = 4;
  fp16.kv_dtype = DType::fp16;
  fp16.q_len = 2;
  fp16.kv_len = {33, 64};
  cases.push_back(fp16);

  HelixStepCase nobody_but_rank0;
  nobody_but_rank0.name = "only_rank0_holds_kv_cp8";
  nobody_but_rank0.cp = 8;
  nobody_but_rank0.page_size = 64;
  nobody_but_rank0.q_len = 2;
  nobody_but_rank0.kv_len = {2, 9, 60};
  cases.push_back(nobody_but_rank0);

  HelixStepCase few_heads;
  few_heads.name = "fewer_heads_than_ranks";
  few_heads.cp = 8;
  few_heads.heads = 5;
  few_heads.kv_len = {300};
  cases.push_back(few_heads);

  HelixStepCase full_dims;
  full_dims.name = "kimi_local_shape_full_dims_cp2";
  full_dims.dims = MlaDims{};
  full_dims.heads = 48;
  full_dims.page_size = 64;
  full_dims.q_len = 2;
  full_dims.generations = 2;
  full_dims.kv_len = {129, 64};
  cases.push_back(full_dims);
  return cases;
}

auto case_name = [](const ::testing::TestParamInfo<HelixStepCase>& info) { return info.param.name; };

INSTANTIATE_TEST_SUITE_P(Decode, HelixInProcess, ::testing::ValuesIn(decode_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Verify, HelixInProcess, ::testing::ValuesIn(verify_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Other, HelixInProcess, ::testing::ValuesIn(other_cases()), case_name);

// New KV written by its owning ranks, then attended over: the append and the
// layout agree on where every position lives.
TEST(HelixInProcessAppend, OwnersWriteTheStepsRowsThenAttentionMatches) {
  for (DType kv_dtype : {DType::bf16, DType::fp8_e4m3}) {
    testing::BatchSpec spec;
    spec.dims = {64, 16};
    spec.heads = 16;
    spec.generations = 3;
    spec.q_len = 3;
    spec.kv_len = {34, 65, 100};
    spec.page_size = 32;
    spec.kv_dtype = kv_dtype;
    spec.kv_scale = testing::default_kv_scale(kv_dtype);
    testing::SyntheticBatch batch(spec);
    const Problem global = batch.problem();
    const std::int32_t cp = 3, width = spec.dims.head_dim();

    // New rows in a recognisable range, bf16.
    std::vector<std::uint16_t> rows(static_cast<std::size_t>(batch.num_tokens() * width));
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = float_to_bf16(std::sin(0.37f * float(i)));
    for (std::int32_t r = 0; r < cp; ++r) {
      const auto dest = helix_kv_append_rows(global.q_len, global.kv_len, global.page_table, global.page_table_stride,
                                             spec.page_size, global.kv.num_pages, cp, r);
      KvAppendArgs args;
      args.pool = batch.pool_.data();
      args.num_pages = global.kv.num_pages;
      args.page_size = spec.page_size;
      args.row_width = width;
      args.kv_dtype = kv_dtype;
      args.kv_scale = global.kv.scale;
      args.new_rows = rows.data();
      args.new_dtype = DType::bf16;
      args.tokens = batch.num_tokens();
      args.destinations = dest.data();
      kv_append_host(args);
    }
    // The newest position of request 0 (33) now holds the appended row.
    const float stored = load_as_float(batch.pool_.data(), kv_dtype, batch.pool_row(0, 33));
    EXPECT_NEAR(stored * global.kv.scale, bf16_to_float(rows[2 * width]), kv_dtype == DType::bf16 ? 0.0 : 0.07);

    dist::HelixDriverOptions options;
    options.cp = cp;
    dist::HelixDriver driver(global, options);
    driver.poison_outputs();
    driver.step();
    std::vector<std::byte> out(batch.out_bytes(), std::byte{0xff});
    driver.fetch_output(out.data(), nullptr);
    const testing::Comparison error =
        testing::compare(out.data(), global.out_dtype, testing::naive_attention(global).out);
    EXPECT_TRUE(error.within(6e-3)) << to_string(kv_dtype) << ": rel L2 " << error.rel_l2_err;
  }
}

}  // namespace
}  // namespace helixmla

#include "multigpu/multigpu_support.hpp"

#include <gtest/gtest.h>

#include "synthetic_batch.hpp"

#include <cstddef>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

namespace helixmla::testing {

float exchange_tag(std::int32_t source, std::int64_t token, std::int32_t head, std::int32_t k) {
  return static_cast<float>(source * 1000000 + token * 10000 + head * 600 + k);
}

RankSide::RankSide(const dist::ExchangeShape& shape, std::int32_t rank, int device, std::int32_t tag_offset) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  const std::int32_t source = rank + tag_offset;
  std::vector<float> values, row_stats;
  for (std::int64_t t = 0; t < shape.tokens; ++t) {
    for (std::int32_t h = 0; h < shape.heads; ++h) {
      for (std::int32_t k = 0; k < shape.width; ++k) values.push_back(exchange_tag(source, t, h, k));
      row_stats.push_back(exchange_tag(source, t, h, 0) + 0.25f);
      row_stats.push_back(exchange_tag(source, t, h, 0) + 0.5f);
    }
  }
  partial = DeviceBuffer(shape.send_partial_bytes());
  partial.upload(values.data(), shape.send_partial_bytes());
  stats = DeviceBuffer(shape.send_stats_bytes());
  stats.upload(row_stats.data(), shape.send_stats_bytes());
  send = DeviceBuffer(shape.send_partial_bytes());
  send_stats = DeviceBuffer(shape.send_stats_bytes());
  recv = DeviceBuffer(shape.recv_partial_bytes(rank));
  recv_stats = DeviceBuffer(shape.recv_stats_bytes(rank));
  for (DeviceBuffer* b : {&send, &send_stats, &recv, &recv_stats}) b->fill_bytes(0xff);
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
}

RankSide::~RankSide() {
  if (stream) cudaStreamDestroy(stream);
}

dist::RankBuffers RankSide::buffers(std::int32_t rank) const {
  return {rank,
          partial.data(),
          static_cast<const float*>(stats.data()),
          send.data(),
          static_cast<float*>(send_stats.data()),
          recv.data(),
          static_cast<float*>(recv_stats.data()),
          stream};
}

void RankSide::expect_received(const dist::ExchangeShape& shape, std::int32_t rank, std::int32_t tag_offset) const {
  expect_received_tags(recv, recv_stats, shape, rank, tag_offset);
}

void expect_received_tags(const DeviceBuffer& recv, const DeviceBuffer& recv_stats, const dist::ExchangeShape& shape,
                          std::int32_t rank, std::int32_t tag_offset) {
  std::vector<float> got(recv.bytes() / sizeof(float)), got_stats(recv_stats.bytes() / sizeof(float));
  recv.download(got.data(), recv.bytes());
  recv_stats.download(got_stats.data(), recv_stats.bytes());
  const HeadRange mine = shape.heads_of(rank);
  std::size_t i = 0, j = 0;
  for (std::int32_t source = 0; source < shape.cp; ++source) {
    for (std::int64_t t = 0; t < shape.tokens; ++t) {
      for (std::int32_t h = mine.begin; h < mine.end(); ++h) {
        for (std::int32_t k = 0; k < shape.width; ++k) {
          ASSERT_EQ(got[i++], exchange_tag(source + tag_offset, t, h, k)) << "rank " << rank << " from " << source;
        }
        ASSERT_EQ(got_stats[j++], exchange_tag(source + tag_offset, t, h, 0) + 0.25f);
        ASSERT_EQ(got_stats[j++], exchange_tag(source + tag_offset, t, h, 0) + 0.5f);
      }
    }
  }
}

void expect_exchange_delivers(dist::Exchange& exchange, const dist::ExchangeShape& shape) {
  RankSide r0(shape, 0, 0), r1(shape, 1, 1);
  const std::vector<dist::RankBuffers> buffers = {r0.buffers(0), r1.buffers(1)};
  exchange.all_to_all(shape, buffers);
  const std::vector<void*> streams = {r0.stream, r1.stream};
  exchange.wait(streams);
  r0.expect_received(shape, 0);
  r1.expect_received(shape, 1);
}

void expect_back_to_back_exchanges(dist::Exchange& exchange, const dist::ExchangeShape& shape) {
  constexpr std::int32_t kB = 2;  // B's tags name sources 2 and 3
  RankSide a0(shape, 0, 0), a1(shape, 1, 1), b0(shape, 0, 0, kB), b1(shape, 1, 1, kB);
  const RankSide* a[] = {&a0, &a1};
  // B sends its own partials into A's receive buffers, on A's streams.
  auto b_into_a = [&](const RankSide& b, std::int32_t rank) {
    dist::RankBuffers buffers = b.buffers(rank);
    buffers.recv_partial = a[rank]->recv.data();
    buffers.recv_stats = static_cast<float*>(a[rank]->recv_stats.data());
    buffers.stream = a[rank]->stream;
    return buffers;
  };
  std::vector<DeviceBuffer> copies;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    copies.emplace_back(a[r]->recv.bytes());
    copies.emplace_back(a[r]->recv_stats.bytes());
  }
  exchange.all_to_all(shape, std::vector<dist::RankBuffers>{a0.buffers(0), a1.buffers(1)});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(copies[2 * r].data(), a[r]->recv.data(), a[r]->recv.bytes(), cudaMemcpyDeviceToDevice,
                              a[r]->stream),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(copies[2 * r + 1].data(), a[r]->recv_stats.data(), a[r]->recv_stats.bytes(),
                              cudaMemcpyDeviceToDevice, a[r]->stream),
              cudaSuccess);
  }
  const std::vector<dist::RankBuffers> b = {b_into_a(b0, 0), b_into_a(b1, 1)};
  exchange.all_to_all(shape, b);
  exchange.all_to_all(shape, b);
  const std::vector<void*> streams = {a0.stream, a1.stream};
  exchange.wait(streams);
  for (std::int32_t r = 0; r < 2; ++r) {
    expect_received_tags(copies[2 * r], copies[2 * r + 1], shape, r, 0);
    a[r]->expect_received(shape, r, kB);
  }
}

HelixStepCase kimi_local_case(std::string name, std::int32_t q_len, DType kv_dtype, std::int32_t cp) {
  HelixStepCase c;
  c.name = std::move(name);
  c.cp = cp;
  c.heads = 48;
  c.generations = 4;
  c.q_len = q_len;
  c.kv_len = {1000, 129, 64, 5};  // groups straddling pages; ranks past 0 empty for the last two
  c.page_size = 64;
  c.kv_dtype = kv_dtype;
  c.dims = MlaDims{};
  return c;
}

void expect_multi_gpu_step_matches(dist::HelixMode mode, const HelixStepCase& c, std::uint64_t seed) {
  SyntheticBatch batch(batch_spec_of(c, seed));
  const Problem global = batch.problem();
  dist::HelixDriverOptions options;
  options.cp = c.cp;
  options.mode = mode;
  for (int d = 0; d < c.cp; ++d) options.devices.push_back(d);
  dist::HelixDriver driver(global, options);
  const HelixStepResult step = expect_helix_step_matches(driver, batch, c.name, {.out_rel_l2 = 1e-2, .stats = 2e-3});
  std::cout << c.name << " (" << driver.exchange_name() << ", " << driver.backends() << "): attention "
            << step.times.attention_us << " us, exchange " << step.times.exchange_us << " us, combine "
            << step.times.combine_us << " us\n";
  if (::testing::Test::HasFatalFailure()) return;

  // Replays reuse the same buffers (and the peer exchange's flags).
  std::string why;
  for (int replay = 0; replay < 3; ++replay) {
    driver.poison_outputs();
    const std::optional<double> graph_us = driver.graph_step_us(&why);
    ASSERT_TRUE(graph_us.has_value()) << c.name << ": " << why;
    expect_fetched_step_matches(driver, batch, step.expected, c.name + " replay " + std::to_string(replay),
                                {.out_rel_l2 = 1e-2, .stats = 2e-3});
  }
}

}  // namespace helixmla::testing

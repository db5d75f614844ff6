// Helix on one GPU: the device KV append, combine and send-buffer packing
// against their host twins, the in-process device exchange, and whole Helix
// steps with every rank on the GPU against the float64 attention of the
// unsplit batch.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "device_batch.hpp"
#include "dist/exchange.hpp"
#include "dist/helix_driver.hpp"
#include "helixmla/helix.hpp"
#include "support/gpu_skip.hpp"
#include "support/helix_step.hpp"
#include "synthetic_batch.hpp"

namespace helixmla {
namespace {

using testing::HelixStepCase;

void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

template <typename T>
testing::DeviceBuffer to_device(const std::vector<T>& host) {
  testing::DeviceBuffer buffer(host.size() * sizeof(T));
  if (!host.empty()) buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}

template <typename T>
std::vector<T> to_host(const testing::DeviceBuffer& buffer) {
  std::vector<T> host(buffer.bytes() / sizeof(T));
  if (!host.empty()) buffer.download(host.data(), buffer.bytes());
  return host;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  return bytes;
}

TEST(HelixGpu, KvAppendMatchesTheHostTwinBitForBit) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const std::vector<std::int32_t> q_len = {1, 4, 2, 3}, kv_len = {40, 66, 2, 128};
  const std::vector<std::int32_t> table = {0, 1, -1, -1, 2, 3, 4, -1, 5, -1, -1, -1, 6, 7, 8, 9};
  const std::int32_t page = 32, stride = 4, num_pages = 12, width = 576;
  const std::int64_t tokens = 10;
  struct Case { DType in, cache; float scale; };
  for (const Case c : {Case{DType::bf16, DType::fp8_e4m3, 1.0f / 64.0f}, Case{DType::fp16, DType::fp8_e4m3, 0.37f},
                       Case{DType::bf16, DType::bf16, 1.0f}, Case{DType::fp16, DType::fp16, 1.0f},
                       Case{DType::fp16, DType::bf16, 0.5f}}) {
    std::vector<std::uint8_t> rows(static_cast<std::size_t>(tokens * width) * dtype_size(c.in));
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t i = 0; i < tokens * width; ++i) {
      const float scale = i % 5 == 0 ? 700.0f : (i % 5 == 1 ? 0.004f : 30.0f);
      store_from_float(rows.data(), c.in, i, u(rng) * scale * c.scale);
    }
    for (std::int32_t cp : {1, 3}) {
      for (std::int32_t r = 0; r < cp; ++r) {
        const auto before = random_bytes(static_cast<std::size_t>(num_pages) * page * width * dtype_size(c.cache), 9 + r);
        const auto dest = helix_kv_append_rows(q_len, kv_len, table, stride, page, num_pages, cp, r);
        auto host_pool = before;
        KvAppendArgs args;
        args.num_pages = num_pages;
        args.page_size = page;
        args.row_width = width;
        args.kv_dtype = c.cache;
        args.kv_scale = c.scale;
        args.new_dtype = c.in;
        args.tokens = tokens;
        args.pool = host_pool.data();
        args.new_rows = rows.data();
        args.destinations = dest.data();
        kv_append_host(args);

        auto d_pool = to_device(before);
        auto d_rows = to_device(rows);
        auto d_dest = to_device(dest);
        args.pool = d_pool.data();
        args.new_rows = d_rows.data();
        args.destinations = static_cast<const std::int64_t*>(d_dest.data());
        kv_append_device(args, nullptr);
        sync();
        const auto device_pool = to_host<std::uint8_t>(d_pool);
        ASSERT_EQ(device_pool, host_pool) << to_string(c.in) << " -> " << to_string(c.cache) << " cp " << cp
                                          << " rank " << r;
      }
    }
  }
}

// Device destinations cannot be checked on the host without a
// synchronisation; the kernel skips those outside the pool instead of
// writing past it (memcheck would see such a write).
TEST(HelixGpu, KvAppendSkipsDestinationsOutsideThePool) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const std::int32_t page = 4, num_pages = 3, width = 576;
  const std::int64_t pool_rows = std::int64_t{page} * num_pages;
  const std::vector<std::int64_t> dest = {5, pool_rows, -7, pool_rows + 1000, -1, 0};
  const auto tokens = static_cast<std::int64_t>(dest.size());
  std::vector<std::uint8_t> rows = random_bytes(static_cast<std::size_t>(tokens * width) * 2, 21);
  for (std::size_t i = 1; i < rows.size(); i += 2) rows[i] = 0x3f;  // bf16 in [0.5, 2): normal, exact through float
  // The pool sits inside a larger buffer whose guard rows must stay as they were.
  const std::size_t row_bytes = static_cast<std::size_t>(width) * 2;
  const auto before = random_bytes(static_cast<std::size_t>(pool_rows + 2) * row_bytes, 22);
  auto d_buffer = to_device(before);
  auto d_rows = to_device(rows);
  auto d_dest = to_device(dest);
  KvAppendArgs args;
  args.num_pages = num_pages;
  args.page_size = page;
  args.row_width = width;
  args.kv_dtype = DType::bf16;
  args.new_dtype = DType::bf16;
  args.tokens = tokens;
  args.pool = static_cast<std::uint8_t*>(d_buffer.data()) + row_bytes;
  args.new_rows = d_rows.data();
  args.destinations = static_cast<const std::int64_t*>(d_dest.data());
  kv_append_device(args, nullptr);
  sync();
  const auto after = to_host<std::uint8_t>(d_buffer);
  auto expected = before;
  for (std::int64_t t : {std::int64_t{0}, std::int64_t{5}}) {  // tokens whose rows 5 and 0 are in the pool
    std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(t * row_bytes), row_bytes,
                expected.begin() + static_cast<std::ptrdiff_t>((dest[t] + 1) * row_bytes));
  }
  EXPECT_EQ(after, expected);
}

TEST(HelixGpu, CombineMatchesTheHostTwin) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (std::int32_t cp : {1, 2, 3, 8}) {
    // Widths past one pass of the kernel's columns (512) take a second, partial pass.
    const std::int32_t heads = 6, width = cp == 3 ? 700 : 512;
    const std::int64_t tokens = 5;
    std::mt19937_64 rng(cp);
    std::uniform_real_distribution<float> v(-1.0f, 1.0f), m(-3.0f, 5.0f), l(0.5f, 40.0f);
    std::vector<float> partial(static_cast<std::size_t>(cp * tokens * heads * width));
    std::vector<float> stats(static_cast<std::size_t>(cp * tokens * heads * 2));
    for (std::int64_t row = 0; row < cp * tokens * heads; ++row) {
      const std::int64_t i = row / (tokens * heads), t = (row / heads) % tokens;
      const bool empty = (cp > 1 && i == cp - 1 && row % 2 == 0) || t == 4;  // token 4: every rank empty
      stats[2 * row] = empty ? -inf : m(rng);
      stats[2 * row + 1] = empty ? 0.0f : l(rng);
      for (std::int32_t k = 0; k < width; ++k) partial[row * width + k] = empty ? nan : v(rng);
    }
    for (DType partial_dtype : {DType::fp32, DType::bf16}) {
      for (DType out_dtype : {DType::fp32, DType::bf16}) {
        std::vector<std::uint8_t> typed(partial.size() * dtype_size(partial_dtype));
        for (std::size_t i = 0; i < partial.size(); ++i) store_from_float(typed.data(), partial_dtype, std::int64_t(i), partial[i]);
        const std::size_t out_elements = static_cast<std::size_t>(tokens * heads * width);
        std::vector<std::uint8_t> host_out(out_elements * dtype_size(out_dtype), 0xff);
        std::vector<float> host_stats(static_cast<std::size_t>(tokens * heads * 2), nan);
        HelixCombineArgs a;
        a.cp = cp;
        a.tokens = tokens;
        a.heads = heads;
        a.width = width;
        a.partial_dtype = partial_dtype;
        a.out_dtype = out_dtype;
        a.partial = typed.data();
        a.stats = stats.data();
        a.out = host_out.data();
        a.out_stats = host_stats.data();
        helix_combine_host(a);

        auto d_partial = to_device(typed);
        auto d_stats = to_device(stats);
        testing::DeviceBuffer d_out(host_out.size()), d_out_stats(host_stats.size() * sizeof(float));
        d_out.fill_bytes(0xff);
        d_out_stats.fill_bytes(0xff);
        a.partial = d_partial.data();
        a.stats = static_cast<const float*>(d_stats.data());
        a.out = d_out.data();
        a.out_stats = static_cast<float*>(d_out_stats.data());
        helix_combine_device(a, nullptr);
        sync();
        const auto device_out = to_host<std::uint8_t>(d_out);
        const auto device_stats = to_host<float>(d_out_stats);
        for (std::size_t i = 0; i < out_elements; ++i) {
          const double want = load_as_float(host_out.data(), out_dtype, std::int64_t(i));
          const double got = load_as_float(device_out.data(), out_dtype, std::int64_t(i));
          // expf and std::exp may differ in the last bit, which can flip one
          // rounding of a bf16 output by one unit (2^-7 relative at most).
          const double tolerance = out_dtype == DType::fp32 ? 1e-5 * (1.0 + std::fabs(want))
                                                             : std::ldexp(std::fabs(want), -7) + 1e-6;
          ASSERT_TRUE(std::isfinite(got)) << "element " << i;
          ASSERT_NEAR(got, want, tolerance) << "cp " << cp << " element " << i;
        }
        for (std::size_t i = 0; i < host_stats.size(); i += 2) {
          EXPECT_EQ(device_stats[i], host_stats[i]);
          EXPECT_NEAR(device_stats[i + 1], host_stats[i + 1], 1e-5 * host_stats[i + 1]);
        }
      }
    }
  }
}

TEST(HelixGpu, PackAndInProcessDeviceExchangeMatchTheHost) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  for (std::int32_t cp : {2, 3, 8}) {
    for (bool separate_streams : {false, true}) {
      const dist::ExchangeShape shape{cp, 3, 24, 512, DType::bf16};
      // Send staging starts poisoned on both sides: the rank's own chunk
      // region must stay untouched (it goes straight to the receive slot).
      std::vector<std::vector<std::uint8_t>> partial, stats_bytes, host_recv, host_recv_stats;
      std::vector<std::vector<std::uint8_t>> host_send, host_send_stats;
      std::vector<dist::RankBuffers> host_buffers;
      for (std::int32_t r = 0; r < cp; ++r) {
        partial.push_back(random_bytes(shape.send_partial_bytes(), 50 + r));
        stats_bytes.push_back(random_bytes(shape.send_stats_bytes(), 80 + r));
        host_send.emplace_back(shape.send_partial_bytes(), 0xff);
        host_send_stats.emplace_back(shape.send_stats_bytes(), 0xff);
        host_recv.emplace_back(shape.recv_partial_bytes(r), 0xff);
        host_recv_stats.emplace_back(shape.recv_stats_bytes(r), 0xff);
      }
      for (std::int32_t r = 0; r < cp; ++r) {
        host_buffers.push_back({r, partial[r].data(), reinterpret_cast<const float*>(stats_bytes[r].data()),
                                host_send[r].data(), reinterpret_cast<float*>(host_send_stats[r].data()),
                                host_recv[r].data(), reinterpret_cast<float*>(host_recv_stats[r].data()), nullptr});
      }
      dist::make_in_process_exchange(cp, Location::host())->all_to_all(shape, host_buffers);

      std::vector<testing::DeviceBuffer> d_partial, d_stats, d_send, d_send_stats, d_recv, d_recv_stats;
      std::vector<cudaStream_t> streams(static_cast<std::size_t>(cp), nullptr);
      std::vector<dist::RankBuffers> buffers;
      for (std::int32_t r = 0; r < cp; ++r) {
        if (separate_streams) ASSERT_EQ(cudaStreamCreate(&streams[r]), cudaSuccess);
        d_partial.push_back(to_device(partial[r]));
        d_stats.push_back(to_device(stats_bytes[r]));
        d_send.emplace_back(shape.send_partial_bytes());
        d_send_stats.emplace_back(shape.send_stats_bytes());
        d_recv.emplace_back(shape.recv_partial_bytes(r));
        d_recv_stats.emplace_back(shape.recv_stats_bytes(r));
        for (auto* d : {&d_send.back(), &d_send_stats.back(), &d_recv.back(), &d_recv_stats.back()}) {
          d->fill_bytes(0xff);
        }
      }
      for (std::int32_t r = 0; r < cp; ++r) {
        buffers.push_back({r, d_partial[r].data(), static_cast<const float*>(d_stats[r].data()), d_send[r].data(),
                           static_cast<float*>(d_send_stats[r].data()), d_recv[r].data(),
                           static_cast<float*>(d_recv_stats[r].data()), streams[r]});
      }
      auto exchange = dist::make_in_process_exchange(cp, Location::cuda(0));
      exchange->all_to_all(shape, buffers);
      std::vector<void*> waits(streams.begin(), streams.end());
      exchange->wait(waits);
      for (std::int32_t r = 0; r < cp; ++r) {
        EXPECT_EQ(to_host<std::uint8_t>(d_send[r]), host_send[r]) << "pack, rank " << r;
        EXPECT_EQ(to_host<std::uint8_t>(d_send_stats[r]), host_send_stats[r]) << "pack stats, rank " << r;
        EXPECT_EQ(to_host<std::uint8_t>(d_recv[r]), host_recv[r]) << "exchange, rank " << r;
        EXPECT_EQ(to_host<std::uint8_t>(d_recv_stats[r]), host_recv_stats[r]) << "exchange stats, rank " << r;
        if (streams[r]) cudaStreamDestroy(streams[r]);
      }
    }
  }
}

// Full MLA dims and 64-token pages unless a case says otherwise.
HelixStepCase gpu_case() {
  HelixStepCase c;
  c.context_len = 70;
  c.page_size = 64;
  c.dims = MlaDims{};
  return c;
}

class HelixGpuStep : public ::testing::TestWithParam<HelixStepCase> {};

TEST_P(HelixGpuStep, MatchesTheUnsplitReference) {
  HELIXMLA_SKIP_WITHOUT_CUDA_DEVICES(1);
  const HelixStepCase& c = GetParam();
  testing::SyntheticBatch batch(testing::batch_spec_of(c, 0x9e11 + c.cp));
  const Problem global = batch.problem();

  dist::HelixDriverOptions options;
  options.cp = c.cp;
  options.mode = dist::HelixMode::device;
  options.devices = {0};
  dist::HelixDriver driver(global, options);
  const testing::HelixStepResult step =
      testing::expect_helix_step_matches(driver, batch, c.name, {.out_rel_l2 = 1e-2, .stats = 2e-3});
  EXPECT_GT(step.times.total_us, 0.0);
  if (HasFatalFailure()) return;

  // The same step replayed from a CUDA graph (attention, exchange and
  // combine of every rank) still matches.
  std::string why;
  driver.poison_outputs();
  const std::optional<double> graph_us = driver.graph_step_us(&why);
  ASSERT_TRUE(graph_us.has_value()) << why;
  testing::expect_fetched_step_matches(driver, batch, step.expected, c.name + " graph replay",
                                       {.out_rel_l2 = 1e-2, .stats = 2e-3});
}

std::vector<HelixStepCase> gpu_cases() {
  std::vector<HelixStepCase> cases;
  for (std::int32_t cp : {1, 2, 3, 4, 8}) {
    for (std::int32_t heads : {16, 48, 128}) {
      HelixStepCase c = gpu_case();
      c.name = "decode_cp" + std::to_string(cp) + "_h" + std::to_string(heads);
      c.cp = cp;
      c.heads = heads;
      c.kv_len = {300, 70, 5};
      cases.push_back(c);
    }
  }
  for (std::int32_t cp : {2, 4, 8}) {
    for (std::int32_t page : {1, 32, 64}) {
      for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
        HelixStepCase c = gpu_case();
        c.name = "verify_cp" + std::to_string(cp) + "_page" + std::to_string(page) + "_" + std::string(to_string(kv));
        c.cp = cp;
        c.heads = 48;
        c.q_len = 3;
        c.page_size = page;
        c.kv_dtype = kv;
        c.kv_len = page == 1 ? std::vector<std::int32_t>{9, 100} : std::vector<std::int32_t>{page + 1, 2 * page + 2, 3};
        cases.push_back(c);
      }
    }
  }
  for (std::int32_t cp : {2, 3}) {
    HelixStepCase mixed = gpu_case();
    mixed.name = "mixed_cp" + std::to_string(cp);
    mixed.cp = cp;
    mixed.heads = 24;
    mixed.contexts = 2;
    mixed.q_len = 2;
    mixed.kv_len = {65, 200};
    cases.push_back(mixed);
  }
  HelixStepCase sparse = gpu_case();
  sparse.name = "most_ranks_empty_cp8_h96";
  sparse.cp = 8;
  sparse.heads = 96;
  sparse.kv_len = {2, 64, 65};
  sparse.q_len = 2;
  cases.push_back(sparse);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(InProcess, HelixGpuStep, ::testing::ValuesIn(gpu_cases()),
                         [](const ::testing::TestParamInfo<HelixStepCase>& info) { return info.param.name; });

}  // namespace
}  // namespace helixmla

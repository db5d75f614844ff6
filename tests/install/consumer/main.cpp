// One decode step through the installed library's public API, on host
// tensors (so the cpu backend runs it on any machine), checked against
// attention computed here from the definition in DESIGN §2.
#include <helixmla/helixmla.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

namespace {

std::uint16_t to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<std::uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

double from_bf16(std::uint16_t h) {
  const std::uint32_t bits = std::uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

int main() {
  constexpr int kHeads = 4, kKvLen = 70, kPage = 16, kDim = 576, kLatent = 512;
  constexpr int kPages = (kKvLen + kPage - 1) / kPage;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::uint16_t> q(kHeads * kDim), pool(kPages * kPage * kDim);
  std::vector<std::uint16_t> out(kHeads * kLatent, 0xffff);  // NaN until written
  for (auto& x : q) x = to_bf16(uniform(rng));
  for (auto& x : pool) x = to_bf16(uniform(rng));
  const std::vector<std::int32_t> q_len{1}, kv_len{kKvLen};
  std::vector<std::int32_t> table;
  for (int b = 0; b < kPages; ++b) table.push_back(kPages - 1 - b);  // pages out of order

  helixmla::Problem p;
  p.num_heads = kHeads;
  p.softmax_scale = 1.0f / std::sqrt(192.0f);
  p.q_dtype = p.out_dtype = helixmla::DType::bf16;
  p.q = q.data();
  p.out = out.data();
  p.kv = {pool.data(), kPages, kPage, helixmla::DType::bf16, 1.0f};
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.page_table = table;
  p.page_table_stride = kPages;

  helixmla::Runtime runtime;
  helixmla::StepPlan step = runtime.plan_step(p);
  auto run = step.prepare({nullptr, 0}, nullptr);
  run->enqueue(nullptr);

  auto kv_row = [&](int token) {
    return pool.data() + (static_cast<std::size_t>(table[token / kPage]) * kPage + token % kPage) * kDim;
  };
  double err = 0.0, norm = 0.0;
  for (int h = 0; h < kHeads; ++h) {
    std::vector<double> s(kKvLen);
    for (int j = 0; j < kKvLen; ++j) {
      double dot = 0.0;
      for (int c = 0; c < kDim; ++c) dot += from_bf16(q[h * kDim + c]) * from_bf16(kv_row(j)[c]);
      s[j] = dot * p.softmax_scale;
    }
    const double m = *std::max_element(s.begin(), s.end());
    double l = 0.0;
    for (double& x : s) l += (x = std::exp(x - m));
    for (int c = 0; c < kLatent; ++c) {
      double want = 0.0;
      for (int j = 0; j < kKvLen; ++j) want += s[j] * from_bf16(kv_row(j)[c]);
      want /= l;
      const double got = from_bf16(out[h * kLatent + c]);
      err += (got - want) * (got - want);  // NaN (unwritten) makes the check fail
      norm += want * want;
    }
  }
  const double rel_l2 = std::sqrt(err / norm);
  std::cout << "installed helixmla: relative L2 error " << rel_l2 << "\n";
  return rel_l2 <= 1e-2 ? 0 : 1;
}

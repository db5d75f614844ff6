// Helix combine, host twin: the log-sum-exp merge of DESIGN §5 against a
// float64 computation, exactness against an unsplit softmax, empty ranks
// (even with garbage partials) and all-empty rows (0, never NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "helixmla/error.hpp"
#include "helixmla/helix.hpp"

namespace helixmla {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct Inputs {
  std::int32_t cp, heads, width;
  std::int64_t tokens;
  std::vector<float> partial;  // [cp, tokens, heads, width]
  std::vector<float> stats;    // [cp, tokens, heads, 2]
  std::size_t row(std::int32_t i, std::int64_t t, std::int32_t h) const {
    return static_cast<std::size_t>((i * tokens + t) * heads + h);
  }
};

// Random partials; rank i is empty for a row when `empty(i, t, h)`, and then
// carries NaN partials and (-inf, 0) stats.
template <typename Empty>
Inputs random_inputs(std::int32_t cp, std::int64_t tokens, std::int32_t heads, std::int32_t width,
                     std::uint64_t seed, Empty empty) {
  Inputs in{cp, heads, width, tokens, {}, {}};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f), m(-4.0f, 6.0f), l(0.5f, 50.0f);
  in.partial.resize(static_cast<std::size_t>(cp * tokens * heads * width));
  in.stats.resize(static_cast<std::size_t>(cp * tokens * heads * 2));
  for (std::int32_t i = 0; i < cp; ++i) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int32_t h = 0; h < heads; ++h) {
        const std::size_t row = in.row(i, t, h);
        const bool none = empty(i, t, h);
        in.stats[2 * row] = none ? -kInf : m(rng);
        in.stats[2 * row + 1] = none ? 0.0f : l(rng);
        for (std::int32_t k = 0; k < width; ++k) {
          in.partial[row * width + k] = none ? kNan : value(rng);
        }
      }
    }
  }
  return in;
}

struct Expected {
  std::vector<double> out, m, l;
};

Expected combine_float64(const Inputs& in) {
  Expected e;
  for (std::int64_t t = 0; t < in.tokens; ++t) {
    for (std::int32_t h = 0; h < in.heads; ++h) {
      double M = -std::numeric_limits<double>::infinity();
      for (std::int32_t i = 0; i < in.cp; ++i) {
        if (in.stats[2 * in.row(i, t, h) + 1] > 0) M = std::max(M, double(in.stats[2 * in.row(i, t, h)]));
      }
      double L = 0.0;
      for (std::int32_t i = 0; i < in.cp; ++i) {
        const double l = in.stats[2 * in.row(i, t, h) + 1];
        if (l > 0) L += l * std::exp(double(in.stats[2 * in.row(i, t, h)]) - M);
      }
      for (std::int32_t k = 0; k < in.width; ++k) {
        double o = 0.0;
        for (std::int32_t i = 0; i < in.cp; ++i) {
          const double l = in.stats[2 * in.row(i, t, h) + 1];
          if (l > 0) {
            o += l * std::exp(double(in.stats[2 * in.row(i, t, h)]) - M) / L *
                 in.partial[in.row(i, t, h) * in.width + k];
          }
        }
        e.out.push_back(L > 0 ? o : 0.0);
      }
      e.m.push_back(M);
      e.l.push_back(L);
    }
  }
  return e;
}

HelixCombineArgs args_for(const Inputs& in, const void* partial, DType partial_dtype, void* out,
                          DType out_dtype, float* out_stats) {
  HelixCombineArgs a;
  a.cp = in.cp;
  a.tokens = in.tokens;
  a.heads = in.heads;
  a.width = in.width;
  a.partial = partial;
  a.partial_dtype = partial_dtype;
  a.stats = in.stats.data();
  a.out = out;
  a.out_dtype = out_dtype;
  a.out_stats = out_stats;
  return a;
}

TEST(HelixCombine, MatchesFloat64WithEmptyRanks) {
  for (std::int32_t cp : {1, 2, 3, 4, 8}) {
    for (std::int32_t heads : {1, 5}) {
      // Rank 1 is empty on every other row; with cp = 1 nothing is empty.
      const Inputs in = random_inputs(cp, 3, heads, 64, 40 + cp, [&](std::int32_t i, std::int64_t t, std::int32_t h) {
        return cp > 1 && i == 1 && (t + h) % 2 == 0;
      });
      const Expected e = combine_float64(in);
      std::vector<float> out(e.out.size(), kNan), stats(e.m.size() * 2, kNan);
      helix_combine_host(args_for(in, in.partial.data(), DType::fp32, out.data(), DType::fp32, stats.data()));
      for (std::size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], e.out[i], 2e-6 * (1.0 + std::fabs(e.out[i]))) << "cp " << cp << " element " << i;
      }
      for (std::size_t r = 0; r < e.m.size(); ++r) {
        EXPECT_FLOAT_EQ(stats[2 * r], static_cast<float>(e.m[r]));
        EXPECT_NEAR(stats[2 * r + 1], e.l[r], 1e-5 * e.l[r]);
      }
    }
  }
}

TEST(HelixCombine, HalfPartialsAndOutputs) {
  const Inputs in = random_inputs(3, 2, 4, 32, 7, [](std::int32_t i, std::int64_t, std::int32_t h) {
    return i == 2 && h == 0;
  });
  const Expected e = combine_float64(in);
  for (DType dtype : {DType::bf16, DType::fp16}) {
    std::vector<std::uint16_t> partial(in.partial.size());
    for (std::size_t i = 0; i < partial.size(); ++i) store_from_float(partial.data(), dtype, std::int64_t(i), in.partial[i]);
    // The float64 result from the same rounded partials.
    Inputs rounded = in;
    for (std::size_t i = 0; i < partial.size(); ++i) rounded.partial[i] = load_as_float(partial.data(), dtype, std::int64_t(i));
    const Expected er = combine_float64(rounded);
    std::vector<std::uint16_t> out(e.out.size(), 0xffff);
    helix_combine_host(args_for(in, partial.data(), dtype, out.data(), dtype, nullptr));
    const double ulp = dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double got = load_as_float(out.data(), dtype, std::int64_t(i));
      ASSERT_NEAR(got, er.out[i], ulp * (std::fabs(er.out[i]) + 1e-3)) << to_string(dtype) << " element " << i;
    }
  }
}

TEST(HelixCombine, EqualsTheUnsplitSoftmax) {
  // One row of 50 logits over 50 values, split over 4 parts (part 3 empty).
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> logit(-8.0, 8.0), value(-1.0, 1.0);
  const int n = 50, width = 8, cp = 4;
  std::vector<double> s(n), v(n * width);
  for (auto& x : s) x = logit(rng);
  for (auto& x : v) x = value(rng);
  const double smax = *std::max_element(s.begin(), s.end());
  double z = 0.0;
  for (double x : s) z += std::exp(x - smax);
  std::vector<double> full(width, 0.0);
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < width; ++k) full[k] += std::exp(s[j] - smax) / z * v[j * width + k];
  }

  Inputs in{cp, 1, width, 1, std::vector<float>(cp * width, kNan), std::vector<float>(cp * 2)};
  for (int i = 0; i < cp; ++i) {
    double m = -std::numeric_limits<double>::infinity(), l = 0.0;
    for (int j = 0; j < n; ++j) {
      if (j % 3 == i) m = std::max(m, s[j]);
    }
    std::vector<double> o(width, 0.0);
    for (int j = 0; j < n; ++j) {
      if (j % 3 != i) continue;
      l += std::exp(s[j] - m);
      for (int k = 0; k < width; ++k) o[k] += std::exp(s[j] - m) * v[j * width + k];
    }
    in.stats[2 * i] = static_cast<float>(m);
    in.stats[2 * i + 1] = static_cast<float>(l);
    if (l > 0) {
      for (int k = 0; k < width; ++k) in.partial[i * width + k] = static_cast<float>(o[k] / l);
    }
  }
  std::vector<float> out(width, kNan), stats(2, kNan);
  helix_combine_host(args_for(in, in.partial.data(), DType::fp32, out.data(), DType::fp32, stats.data()));
  for (int k = 0; k < width; ++k) EXPECT_NEAR(out[k], full[k], 1e-5);
  EXPECT_NEAR(stats[0], smax, 1e-5);
  EXPECT_NEAR(stats[1], z, 1e-4 * z);
}

TEST(HelixCombine, AllEmptyRowsGiveZeroNotNan) {
  Inputs in = random_inputs(4, 2, 3, 16, 9, [](std::int32_t, std::int64_t t, std::int32_t) { return t == 1; });
  // Garbage m on empty partials must not matter either.
  for (std::int32_t i = 0; i < 4; ++i) {
    for (std::int32_t h = 0; h < 3; ++h) in.stats[2 * in.row(i, 1, h)] = i % 2 ? kNan : kInf;
  }
  std::vector<float> out(2 * 3 * 16, kNan), stats(2 * 3 * 2, kNan);
  helix_combine_host(args_for(in, in.partial.data(), DType::fp32, out.data(), DType::fp32, stats.data()));
  for (std::int32_t h = 0; h < 3; ++h) {
    for (std::int32_t k = 0; k < 16; ++k) EXPECT_EQ(out[(3 + h) * 16 + k], 0.0f);
    EXPECT_EQ(stats[2 * (3 + h)], -kInf);
    EXPECT_EQ(stats[2 * (3 + h) + 1], 0.0f);
  }
  for (std::int32_t h = 0; h < 3; ++h) {
    for (std::int32_t k = 0; k < 16; ++k) EXPECT_TRUE(std::isfinite(out[h * 16 + k]));
  }
}

// A rank whose statistics carry NaN input (l NaN, m NaN or +inf) must turn
// its row to NaN, as the unsplit run would, not drop out of a finite answer;
// a rank with m = -inf (logits below float32's range) weighs nothing.
TEST(HelixCombine, PoisonedRanksMakeTheirRowNanAndBelowRangeRanksWeighNothing) {
  struct Poison {
    float m, l;
  };
  for (const Poison bad : {Poison{1.5f, kNan}, Poison{kNan, 3.0f}, Poison{kInf, 3.0f}, Poison{0.5f, -2.0f}}) {
    SCOPED_TRACE("poisoned stats (" + std::to_string(bad.m) + ", " + std::to_string(bad.l) + ")");
    Inputs in = random_inputs(3, 2, 2, 16, 13, [](std::int32_t, std::int64_t, std::int32_t) { return false; });
    // Row (token 0, head 1): rank 2 poisoned. Row (token 1, head 0): rank 1
    // below float32's range; the float64 merge without it is the answer.
    in.stats[2 * in.row(2, 0, 1)] = bad.m;
    in.stats[2 * in.row(2, 0, 1) + 1] = bad.l;
    Inputs without = in;
    without.stats[2 * without.row(1, 1, 0)] = -kInf;
    without.stats[2 * without.row(1, 1, 0) + 1] = 0.0f;
    in.stats[2 * in.row(1, 1, 0)] = -kInf;
    in.stats[2 * in.row(1, 1, 0) + 1] = 7.0f;
    const Expected e = combine_float64(without);
    std::vector<float> out(2 * 2 * 16, 0.25f), stats(2 * 2 * 2, 0.25f);
    helix_combine_host(args_for(in, in.partial.data(), DType::fp32, out.data(), DType::fp32, stats.data()));
    for (std::int64_t row = 0; row < 4; ++row) {
      for (std::int32_t k = 0; k < 16; ++k) {
        const float got = out[static_cast<std::size_t>(row * 16 + k)];
        if (row == 1) {
          EXPECT_TRUE(std::isnan(got)) << "row 1 column " << k << ": " << got;
        } else {
          EXPECT_NEAR(got, e.out[static_cast<std::size_t>(row * 16 + k)], 2e-6) << "row " << row << " column " << k;
        }
      }
    }
    EXPECT_TRUE(std::isnan(stats[2 * 1 + 1])) << "l of the poisoned row: " << stats[3];
    EXPECT_NEAR(stats[2 * 2], e.m[2], 1e-6);
    EXPECT_NEAR(stats[2 * 2 + 1], e.l[2], 1e-5 * e.l[2]);
  }
}

TEST(HelixCombine, WritesOnlyItsHeadsOfAWiderOutput) {
  const Inputs in = random_inputs(2, 2, 3, 8, 11, [](std::int32_t, std::int64_t, std::int32_t) { return false; });
  const Expected e = combine_float64(in);
  const std::int32_t stride = 7, offset = 2;
  std::vector<float> out(2 * stride * 8, -123.0f);
  HelixCombineArgs a = args_for(in, in.partial.data(), DType::fp32, out.data() + offset * 8, DType::fp32, nullptr);
  a.out_head_stride = stride;
  helix_combine_host(a);
  for (std::int64_t t = 0; t < 2; ++t) {
    for (std::int32_t h = 0; h < stride; ++h) {
      for (std::int32_t k = 0; k < 8; ++k) {
        const float got = out[(t * stride + h) * 8 + k];
        if (h >= offset && h < offset + 3) {
          EXPECT_NEAR(got, e.out[(t * 3 + h - offset) * 8 + k], 1e-5);
        } else {
          EXPECT_EQ(got, -123.0f) << "head " << h << " is not this rank's";
        }
      }
    }
  }
}

TEST(HelixCombine, RejectsBadArguments) {
  HelixCombineArgs a;
  a.cp = 0;
  try {
    helix_combine_host(a);
    FAIL() << "cp 0 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "cp");
  }
  a.cp = 2;
  a.tokens = 1;
  a.heads = 2;
  a.partial_dtype = DType::fp8_e4m3;
  EXPECT_THROW(helix_combine_host(a), InvalidArgument);
  a.partial_dtype = DType::fp32;
  EXPECT_THROW(helix_combine_host(a), InvalidArgument);  // null buffers
}

}  // namespace
}  // namespace helixmla

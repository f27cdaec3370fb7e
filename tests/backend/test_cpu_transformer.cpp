// Transformer kernels of the CPU backend against float64 loops: embedding sums, RMSNorm, rotary
// pairs, attention windows (grouped-query), SwiGLU, add; thread and batch invariance.
#include "cpu_test_util.h"

namespace drama::test {
namespace {

constexpr uint32_t kSeed = 7100;

TEST(CpuTransformer, EmbedSumAddsRowsInOrder) {
  std::mt19937 rng(kSeed);
  const int64_t dim = 24, vocab = 10, rows = 3, per = 2;
  std::vector<uint16_t> table;
  for (float f : random_floats(rng, vocab * dim)) table.push_back(f32_to_bf16(f));
  const std::vector<int32_t> ids = {1, 2, 9, 0, 4, 4};
  std::vector<float> out(rows * dim, NAN);
  cpu::CpuBackend(2, cpu::Isa::Scalar)
      .embed_sum(table.data(), dim, ids.data(), rows, per, out.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dim; ++d)
      EXPECT_EQ(out[r * dim + d], bf16_to_f32(table[ids[r * 2] * dim + d]) +
                                      bf16_to_f32(table[ids[r * 2 + 1] * dim + d]));
}

TEST(CpuTransformer, RmsNormMatchesFloat64) {
  std::mt19937 rng(kSeed + 1);
  const int64_t rows = 5, dim = 1024;
  auto x = random_floats(rng, rows * dim, -3.0f, 3.0f);
  std::vector<uint16_t> w;
  for (float f : random_floats(rng, dim, 0.5f, 1.5f)) w.push_back(f32_to_bf16(f));
  for (int threads : {1, 3}) {
    std::vector<float> y(rows * dim);
    cpu::CpuBackend(threads, cpu::Isa::Scalar, 0.0)
        .rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t d = 0; d < dim; ++d) ss += double(x[r * dim + d]) * x[r * dim + d];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int64_t d = 0; d < dim; ++d) {
        const double ref = x[r * dim + d] * inv * bf16_to_f32(w[d]);
        ASSERT_NEAR(y[r * dim + d], ref, 4e-7 * std::abs(ref) + 1e-30);
      }
    }
  }
  // In place gives the same bits.
  std::vector<float> y(rows * dim), z = x;
  cpu::CpuBackend be(1, cpu::Isa::Scalar);
  be.rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
  be.rms_norm(z.data(), w.data(), rows, dim, 1e-6f, z.data());
  EXPECT_TRUE(bitwise_equal(y.data(), z.data(), y.size()));
}

TEST(CpuTransformer, RopeRotatesHalfPairs) {
  std::mt19937 rng(kSeed + 2);
  const int64_t rows = 3, heads = 2, hd = 8, half = hd / 2;
  const std::vector<int32_t> pos = {0, 5, 1000};
  auto x = random_floats(rng, rows * heads * hd);
  auto y = x;
  cpu::CpuBackend(2, cpu::Isa::Scalar).rope(y.data(), rows, heads, hd, pos.data(), 10000.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = std::pow(10000.0, -2.0 * i / hd) * pos[r];
        const float* in = &x[(r * heads + h) * hd];
        const float* out = &y[(r * heads + h) * hd];
        // Pair (i, i + hd/2) rotates by angle a; position 0 is the identity.
        EXPECT_NEAR(out[i], in[i] * std::cos(a) - in[i + half] * std::sin(a), 1e-6);
        EXPECT_NEAR(out[i + half], in[i + half] * std::cos(a) + in[i] * std::sin(a), 1e-6);
        if (pos[r] == 0) {
          EXPECT_EQ(out[i], in[i]);
        }
      }
}

// Attention against float64 with windows 0 (unlimited), 1 and 3, four query heads on two KV
// heads; rows at different positions; thread counts 1..4 bitwise equal; a row alone equals the
// row in the batch.
TEST(CpuTransformer, AttentionWindowsAndGroups) {
  std::mt19937 rng(kSeed + 3);
  const int64_t nh = 4, nkv = 2, hd = 16, cap = 12, rows = 4;
  const std::vector<int32_t> pos = {0, 3, 7, 11};
  auto q = random_floats(rng, rows * nh * hd, -2.0f, 2.0f);
  auto k = random_floats(rng, cap * nkv * hd, -2.0f, 2.0f);
  auto v = random_floats(rng, cap * nkv * hd);
  for (int64_t window : {0, 1, 3}) {
    std::vector<float> first;
    for (int threads : {1, 2, 3, 4}) {
      std::vector<float> out(rows * nh * hd, NAN);
      cpu::CpuBackend(threads, cpu::Isa::Scalar, 0.0)
          .attention(q.data(), rows, pos.data(), nullptr, k.data(), v.data(), nh, nkv, hd, window,
                     out.data());
      if (first.empty()) first = out;
      ASSERT_TRUE(bitwise_equal(out.data(), first.data(), out.size())) << threads;
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> alone(nh * hd);
      cpu::CpuBackend(1, cpu::Isa::Scalar)
          .attention(&q[r * nh * hd], 1, &pos[r], nullptr, k.data(), v.data(), nh, nkv, hd, window,
                     alone.data());
      ASSERT_TRUE(bitwise_equal(alone.data(), &first[r * nh * hd], alone.size()));
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t kvh = h / (nh / nkv);
        const int64_t lo = window ? std::max<int64_t>(0, pos[r] - window + 1) : 0;
        std::vector<double> s;
        for (int64_t j = lo; j <= pos[r]; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e)
            d += double(q[(r * nh + h) * hd + e]) * k[(j * nkv + kvh) * hd + e];
          s.push_back(d / std::sqrt(double(hd)));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double ref = 0;
          for (int64_t j = lo; j <= pos[r]; ++j) ref += s[j - lo] * v[(j * nkv + kvh) * hd + e];
          ASSERT_NEAR(first[(r * nh + h) * hd + e], ref / sum, 2e-6)
              << "window " << window << " row " << r << " head " << h;
        }
      }
    }
  }
}

TEST(CpuTransformer, SwigluAndAdd) {
  std::mt19937 rng(kSeed + 4);
  const int64_t n = 1000;
  auto g = random_floats(rng, n, -6.0f, 6.0f), u = random_floats(rng, n);
  std::vector<float> out(n);
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  be.swiglu(g.data(), u.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(out[i], g[i] / (1.0 + std::exp(-double(g[i]))) * u[i], 1e-6);
  auto y = u;
  be.add(g.data(), n, y.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], u[i] + g[i]);
}

}  // namespace
}  // namespace drama::test

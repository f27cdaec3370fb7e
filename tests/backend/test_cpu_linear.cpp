// NVFP4 and BF16 matrix products of the CPU backend: the scalar oracle against float64, every
// SIMD path against float64 with the same bounds, batch and thread invariance, odd shapes.
#include "backend/cpu/linear.h"
#include "cpu_test_util.h"

namespace drama::test {
namespace {

constexpr uint32_t kSeed = 20261129;
constexpr double kUnit = 0x1.0p-24;  // float32 unit roundoff

// Shapes: odd column counts, in = 16 (one block), in % 32 == 16 (a lone last block), long rows.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 16},   {5, 48},    {7, 272},
                                                          {13, 528}, {33, 1040}, {4, 4096}};

// Per element: |y - ref| <= 1.05 * (in + 2) * u * sum|w x| (the classic worst-case bound for a
// recursive or blocked float32 sum, plus the final scale product). In L2, rounding errors add
// like a random walk: ||y - ref|| <= 4 * u * sqrt(in) * ||sum|w x|||, far below what one BF16 or
// FP16 rounding of the weights or activations would give (about 2^-9 or 2^-12 relative).
template <class W>
void expect_accurate(const W& w, const std::vector<float>& x, int64_t rows,
                     const std::vector<float>& y, const char* what) {
  std::vector<double> ref, mag;
  reference_linear(w, x, rows, ref, mag);
  const double bound = 1.05 * static_cast<double>(w.view.in + 2) * kUnit;
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_LE(std::abs(y[i] - ref[i]), bound * mag[i] + 1e-30)
        << what << " element " << i << " out=" << w.view.out << " in=" << w.view.in;
  double mag2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mag2 += mag[i] * mag[i];
    ref2 += ref[i] * ref[i];
  }
  const double l2_limit = 4.0 * kUnit * std::sqrt(double(w.view.in)) * std::sqrt(mag2 / ref2);
  EXPECT_LE(relative_l2(y, ref), l2_limit) << what;
}

template <class W>
void check_format(cpu::Isa isa, int threads) {
  std::mt19937 rng(kSeed);
  cpu::CpuBackend be(threads, isa, 0.0);
  for (auto [out, in] : kShapes) {
    W w(rng, out, in);
    const int64_t rows = 3;
    auto x = random_floats(rng, rows * in);
    std::vector<float> y(rows * out, NAN);
    be.linear(w.view, x.data(), rows, y.data());
    expect_accurate(w, x, rows, y, std::string(cpu::isa_name(isa)).c_str());
  }
}

TEST(CpuLinear, Nvfp4AccurateEveryPath) {
  std::printf("seed %u\n", kSeed);
  for (auto isa : supported_isas()) check_format<Nvfp4Weight>(isa, 1);
}

TEST(CpuLinear, Bf16AccurateEveryPath) {
  for (auto isa : supported_isas()) check_format<Bf16Weight>(isa, 1);
}

// Row r of a batch is bitwise the row alone, for batch sizes straddling the 2-row and 8-column
// tiles, and results do not depend on the thread count.
template <class W>
void check_invariance(cpu::Isa isa) {
  std::mt19937 rng(kSeed + 1);
  const int64_t out = 37, in = 16 * 23;
  W w(rng, out, in);
  const int64_t max_rows = 37;  // past two row blocks of the decode-once paths
  auto x = random_floats(rng, max_rows * in);
  cpu::CpuBackend one(1, isa);
  std::vector<float> alone(max_rows * out);
  for (int64_t r = 0; r < max_rows; ++r)
    one.linear(w.view, x.data() + r * in, 1, alone.data() + r * out);
  for (int threads : {1, 2, 3, 4}) {
    cpu::CpuBackend be(threads, isa, 0.0);
    for (int64_t rows = 1; rows <= max_rows; ++rows) {
      std::vector<float> y(rows * out, NAN);
      be.linear(w.view, x.data(), rows, y.data());
      ASSERT_TRUE(bitwise_equal(y.data(), alone.data(), rows * out))
          << cpu::isa_name(isa) << " rows=" << rows << " threads=" << threads;
    }
  }
}

TEST(CpuLinear, Nvfp4BatchAndThreadInvariant) {
  for (auto isa : supported_isas()) check_invariance<Nvfp4Weight>(isa);
}

TEST(CpuLinear, Bf16BatchAndThreadInvariant) {
  for (auto isa : supported_isas()) check_invariance<Bf16Weight>(isa);
}

// SIMD paths agree closely with the scalar oracle (they sum in a different order).
TEST(CpuLinear, SimdPathsCloseToScalar) {
  std::mt19937 rng(kSeed + 2);
  const int64_t out = 29, in = 16 * 57, rows = 2;
  Nvfp4Weight w(rng, out, in);
  auto x = random_floats(rng, rows * in);
  std::vector<float> want(rows * out);
  cpu::CpuBackend(1, cpu::Isa::Scalar).linear(w.view, x.data(), rows, want.data());
  std::vector<double> want64(want.begin(), want.end());
  for (auto isa : supported_isas()) {
    std::vector<float> y(rows * out);
    cpu::CpuBackend(2, isa).linear(w.view, x.data(), rows, y.data());
    // Float32 activations: relative L2 about sqrt(k) u. The AVX-512 NVFP4 path holds activations
    // as a bfloat16 pair (relative error <= 2^-17, measured rms 2^-18.7 = 2.4e-6), bounded at
    // 4e-6 (see src/contract/kernels_linear.cpp).
    const bool pair = isa == cpu::Isa::Avx512 && cpu::nvfp4_avx512_supported();
    EXPECT_LE(relative_l2(y, want64), pair ? 4e-6 : 1e-6) << cpu::isa_name(isa);
  }
}

// A NaN block scale (e4m3 0x7f) poisons exactly the outputs of its column in every path.
// The AVX-512 NVFP4 path's prepared activations follow the layout documented in
// linear_avx512.cpp word for word: super-chunk s of 256 inputs is 4 chunks of [even hi, even lo,
// odd hi, odd lo], 32 words each; word 2i + e of chunk q's even (odd) vectors holds input
// 256s + 16i + 4q + 2e (+1), hi = f32_to_bf16(x), lo = f32_to_bf16(x - hi), zeros past the row's
// end. Special values included.
TEST(CpuLinear, Avx512PreparedActivationsMatchTheirDefinition) {
  if (!cpu::isa_supported(cpu::Isa::Avx512) || !cpu::nvfp4_avx512_supported())
    GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  std::mt19937 rng(kSeed);
  const float specials[] = {0.0f,      -0.0f,         1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f,
                            0x1p-130f, -0x1.8p-140f,  INFINITY,         -INFINITY,
                            NAN,       3.4028235e38f, -1.0000001f,      65535.0f};
  for (int64_t in : {16, 48, 64, 80, 256, 272, 1040}) {
    const int64_t rows = 3;
    auto x = random_floats(rng, rows * in);
    for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i)
      x[i * 7 % x.size()] = specials[i];
    const int64_t stride = 2 * cpu::nvfp4_prepared_floats_avx512(in);  // words per row
    std::vector<float> prepared(rows * stride / 2 + 1, NAN);
    cpu::nvfp4_prepare_x_avx512(x.data(), rows, in, prepared.data());
    std::vector<uint16_t> words(rows * stride);
    std::memcpy(words.data(), prepared.data(), words.size() * sizeof(uint16_t));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < stride / 128; ++c)  // chunk c = 4s + q
        for (int64_t w = 0; w < 32; ++w)
          for (int odd = 0; odd < 2; ++odd) {
            const int64_t i = 256 * (c / 4) + 16 * (w / 2) + 4 * (c % 4) + 2 * (w % 2) + odd;
            uint16_t hi = 0, lo = 0;
            if (i < in) {
              const float v = x[r * in + i];
              hi = f32_to_bf16(v);
              lo = f32_to_bf16(v - bf16_to_f32(hi));
            }
            const uint16_t* vec = words.data() + r * stride + c * 128 + odd * 64;
            ASSERT_EQ(vec[w], hi) << "in=" << in << " row " << r << " input " << i;
            ASSERT_EQ(vec[32 + w], lo) << "in=" << in << " row " << r << " input " << i;
          }
  }
}

TEST(CpuLinear, Nvfp4NanScalePropagates) {
  std::mt19937 rng(kSeed + 3);
  const int64_t out = 6, in = 64;
  Nvfp4Weight w(rng, out, in);
  w.scales[2 * (in / 16) + 1] = 0x7f;
  auto x = random_floats(rng, in);
  for (auto isa : supported_isas()) {
    std::vector<float> y(out);
    cpu::CpuBackend(1, isa).linear(w.view, x.data(), 1, y.data());
    for (int64_t o = 0; o < out; ++o)
      EXPECT_EQ(std::isnan(y[o]), o == 2) << cpu::isa_name(isa) << " column " << o;
  }
}

TEST(CpuLinear, DequantizeMatchesDefinition) {
  std::mt19937 rng(kSeed + 4);
  const int64_t out = 5, in = 48;
  Nvfp4Weight w(rng, out, in);
  Bf16Weight b(rng, out, in);
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  std::vector<float> got(3 * in);
  be.dequantize(w.view, 1, 3, got.data());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < in; ++i) ASSERT_EQ(got[r * in + i], static_cast<float>(w.at(1 + r, i)));
  be.dequantize(b.view, 2, 3, got.data());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < in; ++i) ASSERT_EQ(got[r * in + i], static_cast<float>(b.at(2 + r, i)));
}

}  // namespace
}  // namespace drama::test

// Codec kernels of the CPU backend against float64 loops: grouped/strided/dilated conv1d,
// transposed conv1d, ELU, exact GELU, LayerNorm, layer scale, vector-quantizer decode/encode.
#include <map>

#include "cpu_test_util.h"

namespace drama::test {
namespace {

constexpr uint32_t kSeed = 3030;

TEST(CpuCodec, Conv1dGroupsStrideDilation) {
  std::mt19937 rng(kSeed);
  const int64_t in_ch = 4, out_ch = 6, kernel = 3, stride = 2, dilation = 2, groups = 2, len = 17;
  const int64_t ipg = in_ch / groups, opg = out_ch / groups;
  const int64_t out_len = (len - dilation * (kernel - 1) - 1) / stride + 1;
  auto x = random_floats(rng, in_ch * len), w = random_floats(rng, out_ch * ipg * kernel);
  auto b = random_floats(rng, out_ch);
  for (int threads : {1, 3}) {
    std::vector<float> y(out_ch * out_len, NAN);
    cpu::CpuBackend(threads, cpu::Isa::Scalar, 0.0)
        .conv1d(x.data(), in_ch, len, w.data(), b.data(), out_ch, kernel, stride, dilation, groups,
                y.data(), out_len);
    for (int64_t o = 0; o < out_ch; ++o)
      for (int64_t t = 0; t < out_len; ++t) {
        double ref = b[o];
        const int64_t g = o / opg;
        for (int64_t c = 0; c < ipg; ++c)
          for (int64_t j = 0; j < kernel; ++j)
            ref += double(w[(o * ipg + c) * kernel + j]) *
                   x[(g * ipg + c) * len + t * stride + j * dilation];
        ASSERT_NEAR(y[o * out_len + t], ref, 1e-5) << o << "," << t;
      }
  }
}

TEST(CpuCodec, ConvTranspose1dFullOutput) {
  std::mt19937 rng(kSeed + 1);
  const int64_t in_ch = 4, out_ch = 2, kernel = 4, stride = 2, groups = 2, len = 5;
  const int64_t ipg = in_ch / groups, opg = out_ch / groups, out_len = (len - 1) * stride + kernel;
  auto x = random_floats(rng, in_ch * len), w = random_floats(rng, in_ch * opg * kernel);
  auto b = random_floats(rng, out_ch);
  std::vector<double> ref(out_ch * out_len);
  for (int64_t o = 0; o < out_ch; ++o)
    for (int64_t u = 0; u < out_len; ++u) ref[o * out_len + u] = b[o];
  for (int64_t ci = 0; ci < in_ch; ++ci)
    for (int64_t ol = 0; ol < opg; ++ol)
      for (int64_t t = 0; t < len; ++t)
        for (int64_t j = 0; j < kernel; ++j) {
          const int64_t o = (ci / ipg) * opg + ol;
          ref[o * out_len + t * stride + j] +=
              double(x[ci * len + t]) * w[(ci * opg + ol) * kernel + j];
        }
  std::vector<float> y(out_ch * out_len, NAN);
  cpu::CpuBackend(2, cpu::Isa::Scalar)
      .conv_transpose1d(x.data(), in_ch, len, w.data(), b.data(), out_ch, kernel, stride, groups,
                        y.data());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5) << i;
}

// Every SIMD path reduces each output in the scalar oracle's order, so its outputs are BITWISE
// equal to the scalar kernel's, for any thread count: shapes cover the lane-over-time tiles
// (4/2/1 channels x 4/8/1 vectors, ragged ends), lanes over channels (short outputs, strides),
// the polyphase transposed convolution (edge blocks, kernel not a multiple of the stride, groups),
// the linear_f32 form (one input channel, long kernel, dilation = row length) and Mimi's shapes;
// the last shapes carry enough work for the pool to split them across threads.
TEST(CpuCodec, Conv1dSimdBitwiseEqualsScalar) {
  struct Shape {
    int64_t in, out, kernel, stride, dilation, groups, len;
    bool bias;
  };
  const Shape shapes[] = {
      {8, 16, 7, 1, 1, 1, 40, true},          {16, 32, 4, 2, 1, 1, 33, true},
      {8, 8, 3, 1, 9, 1, 50, true},           {8, 8, 4, 2, 1, 8, 20, false},
      {32, 1, 3, 1, 1, 1, 19, true},          {64, 64, 1, 1, 1, 1, 5, false},
      {64, 32, 3, 1, 1, 1, 16 * 9 + 7, true}, {32, 64, 1, 1, 1, 1, 96, true},
      {48, 96, 7, 1, 1, 1, 8, true},          {48, 35, 7, 1, 1, 1, 9, true},
      {16, 32, 4, 2, 1, 2, 12, true},         {1, 2, 37, 1, 53, 1, 37 * 53, false},
      {1, 3, 40, 1, 70, 1, 40 * 70, false},   {12, 24, 3, 1, 2, 3, 70, true},
      {10, 32, 3, 1, 1, 1, 9, true},          {10, 34, 3, 2, 2, 1, 15, false},
      {64, 64, 7, 1, 1, 1, 600, true},        {96, 64, 7, 1, 1, 1, 8, true}};
  std::mt19937 rng(kSeed + 10);
  for (const Shape& sh : shapes) {
    const int64_t ipg = sh.in / sh.groups;
    const int64_t out_len = (sh.len - sh.dilation * (sh.kernel - 1) - 1) / sh.stride + 1;
    auto x = random_floats(rng, sh.in * sh.len), w = random_floats(rng, sh.out * ipg * sh.kernel);
    auto b = random_floats(rng, sh.out);
    std::vector<float> ref(sh.out * out_len, NAN);
    cpu::CpuBackend(1, cpu::Isa::Scalar)
        .conv1d(x.data(), sh.in, sh.len, w.data(), sh.bias ? b.data() : nullptr, sh.out, sh.kernel,
                sh.stride, sh.dilation, sh.groups, ref.data(), out_len);
    for (cpu::Isa isa : supported_isas())
      for (int threads : {1, 2, 3}) {
        std::vector<float> y(ref.size(), NAN);
        cpu::CpuBackend(threads, isa, 0.0)
            .conv1d(x.data(), sh.in, sh.len, w.data(), sh.bias ? b.data() : nullptr, sh.out,
                    sh.kernel, sh.stride, sh.dilation, sh.groups, y.data(), out_len);
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), ref.size() * sizeof(float)))
            << cpu::isa_name(isa) << " threads " << threads << " in " << sh.in << " out " << sh.out
            << " k " << sh.kernel << " len " << sh.len;
      }
  }
}

TEST(CpuCodec, ConvTranspose1dSimdBitwiseEqualsScalar) {
  struct Shape {
    int64_t in, out, kernel, stride, groups, len;
    bool bias;
  };
  const Shape shapes[] = {
      {16, 8, 16, 8, 1, 5, true},  {8, 8, 4, 2, 8, 9, false},   {4, 6, 3, 1, 1, 7, true},
      {12, 6, 6, 3, 3, 4, true},   {64, 32, 16, 8, 1, 3, true}, {32, 16, 12, 6, 1, 17, true},
      {16, 8, 10, 5, 1, 97, true}, {16, 8, 8, 4, 1, 81, false}, {24, 18, 7, 3, 3, 70, true},
      {8, 5, 5, 5, 1, 40, true},   {16, 8, 8, 4, 2, 200, true}, {64, 32, 8, 4, 1, 300, true},
      {512, 64, 16, 8, 1, 3, true}};
  std::mt19937 rng(kSeed + 11);
  for (const Shape& sh : shapes) {
    const int64_t opg = sh.out / sh.groups, out_len = (sh.len - 1) * sh.stride + sh.kernel;
    auto x = random_floats(rng, sh.in * sh.len), w = random_floats(rng, sh.in * opg * sh.kernel);
    auto b = random_floats(rng, sh.out);
    std::vector<float> ref(sh.out * out_len, NAN);
    cpu::CpuBackend(1, cpu::Isa::Scalar)
        .conv_transpose1d(x.data(), sh.in, sh.len, w.data(), sh.bias ? b.data() : nullptr, sh.out,
                          sh.kernel, sh.stride, sh.groups, ref.data());
    for (cpu::Isa isa : supported_isas())
      for (int threads : {1, 2, 3}) {
        std::vector<float> y(ref.size(), NAN);
        cpu::CpuBackend(threads, isa, 0.0)
            .conv_transpose1d(x.data(), sh.in, sh.len, w.data(), sh.bias ? b.data() : nullptr,
                              sh.out, sh.kernel, sh.stride, sh.groups, y.data());
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), ref.size() * sizeof(float)))
            << cpu::isa_name(isa) << " threads " << threads << " in " << sh.in << " out " << sh.out
            << " k " << sh.kernel << " s " << sh.stride << " len " << sh.len;
      }
  }
}

TEST(CpuCodec, Activations) {
  std::mt19937 rng(kSeed + 2);
  auto x = random_floats(rng, 2000, -8.0f, 8.0f);
  std::vector<float> e(x.size()), g(x.size());
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  be.elu(x.data(), x.size(), 1.0f, e.data());
  be.gelu(x.data(), x.size(), g.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    ASSERT_NEAR(e[i], v > 0 ? v : std::expm1(v), 1e-6);
    ASSERT_NEAR(g[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 2e-6 * (1 + std::abs(v)));
  }
}

// ELU on every ISA (the AVX-512 one gathers the inputs that are not positive, runs them densely
// and puts them back, in blocks of 1024): each element is the value it gets alone, in place or
// not, at lengths around the vector, group and block sizes, with signed zeros, NaN, infinities,
// values past the exponential's clamp and tiny negatives; the AVX-512 and AVX2 paths (the same
// float64 polynomial) agree bitwise.
TEST(CpuCodec, EluOfEachElementIsItsValueAlone) {
  std::mt19937 rng(kSeed + 7);
  std::vector<float> pool = random_floats(rng, 5000, -12.0f, 6.0f);
  const float special[] = {0.0f,    -0.0f,  NAN,    INFINITY, -INFINITY, -90.0f, -1e-9f,
                           -1e-30f, 1e-30f, -80.0f, 88.0f,    -17.5f,    -1.0f,  3.0f};
  for (size_t i = 0; i < std::size(special); ++i) pool[i * 97] = special[i];
  std::map<cpu::Isa, std::vector<float>> whole;
  for (cpu::Isa isa : supported_isas()) {
    cpu::CpuBackend be(1, isa, 0.0);
    for (int64_t n : {1, 7, 15, 16, 17, 63, 64, 65, 1023, 1024, 1025, 2049, 5000}) {
      std::vector<float> y(size_t(n), 123.0f), in_place(pool.begin(), pool.begin() + n);
      be.elu(pool.data(), n, 1.0f, y.data());
      be.elu(in_place.data(), n, 1.0f, in_place.data());
      for (int64_t i = 0; i < n; ++i) {
        float alone = 0;
        be.elu(&pool[size_t(i)], 1, 1.0f, &alone);
        ASSERT_EQ(0, std::memcmp(&y[size_t(i)], &alone, sizeof alone))
            << cpu::isa_name(isa) << " n " << n << " element " << i << " x " << pool[size_t(i)];
        ASSERT_EQ(0, std::memcmp(&in_place[size_t(i)], &alone, sizeof alone))
            << cpu::isa_name(isa) << " in place, n " << n << " element " << i;
      }
      if (n == 5000) whole[isa] = y;
    }
  }
  if (whole.count(cpu::Isa::Avx512) && whole.count(cpu::Isa::Avx2)) {
    EXPECT_EQ(0, std::memcmp(whole[cpu::Isa::Avx512].data(), whole[cpu::Isa::Avx2].data(),
                             whole[cpu::Isa::Avx2].size() * sizeof(float)));
  }
}

TEST(CpuCodec, LayerNormAndScale) {
  std::mt19937 rng(kSeed + 3);
  const int64_t rows = 3, dim = 512;
  auto x = random_floats(rng, rows * dim, -2.0f, 3.0f), w = random_floats(rng, dim);
  auto b = random_floats(rng, dim);
  std::vector<float> y(rows * dim), z(rows * dim);
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  be.layer_norm(x.data(), w.data(), b.data(), rows, dim, 1e-5f, y.data());
  be.scale_rows(x.data(), w.data(), rows, dim, z.data());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t d = 0; d < dim; ++d) m += x[r * dim + d];
    m /= dim;
    for (int64_t d = 0; d < dim; ++d) v += (x[r * dim + d] - m) * (x[r * dim + d] - m);
    v /= dim;
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_NEAR(y[r * dim + d], (x[r * dim + d] - m) / std::sqrt(v + 1e-5) * w[d] + b[d], 2e-6);
      ASSERT_EQ(z[r * dim + d], x[r * dim + d] * w[d]);
    }
  }
}

TEST(CpuCodec, VectorQuantizerRoundTripAndTies) {
  std::mt19937 rng(kSeed + 4);
  const int64_t size = 64, dim = 8;
  auto book = random_floats(rng, size * dim);
  std::vector<int32_t> codes = {5, 0, 63, 17}, back(4);
  std::vector<float> vecs(4 * dim);
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  be.vq_decode(book.data(), dim, codes.data(), 4, vecs.data());
  be.vq_encode(book.data(), size, dim, vecs.data(), 4, back.data());
  EXPECT_EQ(back, codes);
  // Two identical codebook rows: the lower index wins.
  std::copy(book.begin() + 9 * dim, book.begin() + 10 * dim, book.begin() + 3 * dim);
  int32_t code = -1;
  be.vq_encode(book.data(), size, dim, book.data() + 9 * dim, 1, &code);
  EXPECT_EQ(code, 3);
}

}  // namespace
}  // namespace drama::test

// NVFP4 reference quantizer (spec section 4): exact codes on hand-made blocks, ties, zero blocks,
// the amax -> 6 mapping and the round-trip error bound.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "format/nvfp4.h"
#include "format/random_checkpoint.h"
#include "util/dtype.h"
#include "util/error.h"

namespace drama {
namespace {

uint8_t code_at(const Nvfp4Matrix& m, int64_t o, int64_t i) {
  const uint8_t byte = m.codes[(o * m.in + i) / 2];
  return (i & 1) ? (byte >> 4) : (byte & 15);
}

TEST(Nvfp4, GridValuesQuantizeExactlyWithLowNibbleFirst) {
  // Block 0 has amax 10.5 = 2688 * 2^-8, so scale2 = 2^-8 exactly and block 0's scale is 448.
  // Block 1 (amax 6) gets scale 256, so its divisor 256 * 2^-8 is exactly 1.
  std::vector<float> w(32, 0.0f);
  w[0] = 10.5f;
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) {
    w[16 + i] = grid[i];
    w[24 + i] = -grid[i];
  }
  const Nvfp4Matrix m = nvfp4_quantize(w, 1, 32);
  EXPECT_EQ(m.scale2, 0x1.0p-8f);
  EXPECT_EQ(e4m3_to_f32(m.scales[0]), 448.0f);
  EXPECT_EQ(e4m3_to_f32(m.scales[1]), 256.0f);
  EXPECT_EQ(code_at(m, 0, 0), 7);  // amax maps to 6
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(code_at(m, 0, 16 + i), i) << "grid value " << grid[i];
    EXPECT_EQ(code_at(m, 0, 24 + i), i == 0 ? 0 : 8 + i) << "grid value " << -grid[i];
  }
  // Element 2j in the low nibble: w[17] = 0.5 (code 1) is the high nibble of byte 8.
  EXPECT_EQ(m.codes[8], 0x10);
  std::vector<float> back(32);
  nvfp4_dequantize(m.codes.data(), m.scales.data(), m.scale2, 32, 0, 1, back.data());
  for (int i = 16; i < 32; ++i) EXPECT_EQ(back[i], w[i]) << i;
}

TEST(Nvfp4, TiesRoundToEvenCode) {
  // Divisor exactly 1 (see above): these values sit halfway between two grid points.
  std::vector<float> w(32, 0.0f);
  w[0] = 10.5f;
  const float ties[8] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.75f};
  const uint8_t want[8] = {0, 2, 2, 4, 4, 6, 6, 8 | 2};  // 0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0
  for (int i = 0; i < 8; ++i) w[16 + i] = ties[i];
  w[31] = 6.0f;  // block 1 amax
  const Nvfp4Matrix m = nvfp4_quantize(w, 1, 32);
  ASSERT_EQ(e4m3_to_f32(m.scales[1]), 256.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(code_at(m, 0, 16 + i), want[i]) << ties[i];
}

TEST(Nvfp4, ZeroBlockStoresScaleOne) {
  std::vector<float> w(64, 0.0f);
  for (int i = 16; i < 32; ++i) w[i] = 0.1f * static_cast<float>(i - 20);
  const Nvfp4Matrix m = nvfp4_quantize(w, 2, 32);
  EXPECT_EQ(m.scales[0], 0x38);  // row 0 block 0 is all zero: scale 1.0
  EXPECT_EQ(m.scales[2], 0x38);
  EXPECT_EQ(m.scales[3], 0x38);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(code_at(m, 0, i), 0);
  const Nvfp4Matrix z = nvfp4_quantize(std::vector<float>(32, 0.0f), 1, 32);
  EXPECT_EQ(z.scale2, 1.0f);
  EXPECT_EQ(z.scales[0], 0x38);
}

TEST(Nvfp4, BlockAmaxMapsToSixAndRoundTripIsBounded) {
  const int64_t out = 24, in = 96;
  const uint64_t seed = 7;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<float> w(out * in);
  const uint64_t key = random_tensor_key(seed, "nvfp4 test");
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * random_unit_normal(key, i);
  const Nvfp4Matrix m = nvfp4_quantize(w, out, in);
  std::vector<float> back(w.size());
  nvfp4_dequantize(m.codes.data(), m.scales.data(), m.scale2, in, 0, out, back.data());
  double err = 0, ref = 0;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t b = 0; b < in / 16; ++b) {
      const float step = e4m3_to_f32(m.scales[o * (in / 16) + b]) * m.scale2;
      int64_t arg = 0;
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t at = o * in + b * 16 + i;
        if (std::fabs(w[at]) > std::fabs(w[o * in + b * 16 + arg])) arg = i;
        // Grid spacing is at most 2 (4 -> 6) and a rounded block scale overshoots by at most
        // 1/16 of 6, so no element is off by more than one divisor.
        EXPECT_LE(std::fabs(back[at] - w[at]), step * 1.0001f) << o << "," << b * 16 + i;
        err += (back[at] - w[at]) * double(back[at] - w[at]);
        ref += double(w[at]) * w[at];
      }
      EXPECT_EQ(code_at(m, o, b * 16 + arg) & 7, 7) << "block amax must map to 6";
    }
  EXPECT_LT(err / ref, 0.02) << "NMSE";
  // The sub-range helper dequantizes the same rows.
  std::vector<float> rows(2 * in);
  nvfp4_dequantize(m.codes.data(), m.scales.data(), m.scale2, in, 5, 2, rows.data());
  for (int64_t i = 0; i < 2 * in; ++i) EXPECT_EQ(rows[i], back[5 * in + i]);
}

TEST(Nvfp4, RefusesBadInput) {
  EXPECT_THROW(nvfp4_quantize(std::vector<float>(24, 1.0f), 1, 24), Error);
  EXPECT_THROW(nvfp4_quantize(std::vector<float>(16, 1.0f), 2, 16), Error);
  std::vector<float> w(16, 1.0f);
  w[3] = NAN;
  EXPECT_THROW(nvfp4_quantize(w, 1, 16), Error);
}

TEST(Nvfp4, SharedScale2IsUsed) {
  std::vector<float> w(16, 1.0f);
  const Nvfp4Matrix m = nvfp4_quantize(w, 1, 16, 0.01f);
  EXPECT_EQ(m.scale2, 0.01f);
  std::vector<float> back(16);
  nvfp4_dequantize(m.codes.data(), m.scales.data(), m.scale2, 16, 0, 1, back.data());
  EXPECT_NEAR(back[0], 1.0f, 1.0f / 16);
}

}  // namespace
}  // namespace drama

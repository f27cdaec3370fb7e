// NVFP4 quantize / dequantize reference (spec section 4, ModelOpt's rules).
#include "format/nvfp4.h"

#include <cmath>
#include <string>

#include "util/dtype.h"
#include "util/error.h"

namespace drama {

namespace {
constexpr float kE2m1Max = 6.0f;
constexpr float kE4m3Max = 448.0f;
constexpr uint8_t kE4m3One = 0x38;  // 1.0 in float8_e4m3fn
}  // namespace

float nvfp4_tensor_scale(std::span<const float> w) {
  float amax = 0.0f;
  for (float v : w) {
    if (!std::isfinite(v)) throw Error("nvfp4 quantize: the matrix holds NaN or infinity");
    amax = std::fmax(amax, std::fabs(v));
  }
  return amax > 0.0f ? amax / (kE2m1Max * kE4m3Max) : 1.0f;
}

Nvfp4Matrix nvfp4_quantize(std::span<const float> w, int64_t out, int64_t in,
                           std::optional<float> scale2) {
  if (in % kNvfp4Block != 0)
    throw Error("nvfp4 quantize: the input size " + std::to_string(in) +
                " is not a multiple of 16");
  if (static_cast<int64_t>(w.size()) != out * in)
    throw Error("nvfp4 quantize: the matrix has " + std::to_string(w.size()) +
                " values, expected " + std::to_string(out * in));
  Nvfp4Matrix m;
  m.out = out;
  m.in = in;
  m.scale2 = scale2 ? *scale2 : nvfp4_tensor_scale(w);
  if (!(m.scale2 > 0.0f) || !std::isfinite(m.scale2))
    throw Error("nvfp4 quantize: weight_scale_2 must be positive and finite");
  const int64_t blocks = in / kNvfp4Block;
  m.codes.assign(static_cast<size_t>(out * in / 2), 0);
  m.scales.assign(static_cast<size_t>(out * blocks), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* x = w.data() + o * in + b * kNvfp4Block;
      float amax = 0.0f;
      for (int64_t i = 0; i < kNvfp4Block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
      uint8_t scale = f32_to_e4m3(amax / (kE2m1Max * m.scale2));
      // A zero scale (an all-zero block, or one that underflows E4M3) is stored as 1.0 so that
      // dividing by it stays finite; its codes then round to zero.
      if ((scale & 0x7f) == 0) scale = kE4m3One;
      m.scales[o * blocks + b] = scale;
      // ModelOpt divides by the product of the rounded block scale and the tensor scale.
      const float denom = e4m3_to_f32(scale) * m.scale2;
      uint8_t* dst = m.codes.data() + (o * in + b * kNvfp4Block) / 2;
      for (int64_t i = 0; i < kNvfp4Block; i += 2) {
        const uint8_t lo = f32_to_e2m1(x[i] / denom);
        const uint8_t hi = f32_to_e2m1(x[i + 1] / denom);
        dst[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  return m;
}

void nvfp4_dequantize(const uint8_t* codes, const uint8_t* scales, float scale2, int64_t in,
                      int64_t row0, int64_t nrows, float* out) {
  const int64_t blocks = in / kNvfp4Block;
  for (int64_t r = 0; r < nrows; ++r) {
    const int64_t o = row0 + r;
    for (int64_t i = 0; i < in; ++i) {
      const uint8_t byte = codes[(o * in + i) / 2];
      const uint8_t code = (i & 1) ? (byte >> 4) : (byte & 15);
      out[r * in + i] =
          e2m1_to_f32(code) * e4m3_to_f32(scales[o * blocks + i / kNvfp4Block]) * scale2;
    }
  }
}

}  // namespace drama

// Scalar matrix products: the oracle the SIMD paths are tested against (spec section 4).
#include "backend/cpu/linear.h"
#include "util/dtype.h"

namespace drama::cpu {

void nvfp4_linear_scalar(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                         int64_t o1) {
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const int64_t in = w.in;
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* c = codes + o * (in / 2);
    const uint8_t* s = w.scales + o * (in / 16);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      float acc = 0.0f;
      for (int64_t b = 0; b < in / 16; ++b) {
        const float scale = e4m3_to_f32(s[b]);
        for (int64_t j = 0; j < 8; ++j) {
          const uint8_t byte = c[b * 8 + j];
          // e2m1 * e4m3 is exact in float (at most 6 significant bits).
          acc += e2m1_to_f32(byte & 15) * scale * xr[b * 16 + 2 * j];
          acc += e2m1_to_f32(byte >> 4) * scale * xr[b * 16 + 2 * j + 1];
        }
      }
      y[r * w.out + o] = acc * w.scale2;
    }
  }
}

void bf16_linear_scalar(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                        int64_t o1) {
  const auto* data = static_cast<const uint16_t*>(w.data);
  for (int64_t o = o0; o < o1; ++o) {
    const uint16_t* wr = data + o * w.in;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * w.in;
      float acc = 0.0f;
      for (int64_t i = 0; i < w.in; ++i) acc += bf16_to_f32(wr[i]) * xr[i];
      y[r * w.out + o] = acc;
    }
  }
}

}  // namespace drama::cpu

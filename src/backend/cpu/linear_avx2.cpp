// avx2 matrix products (placeholder forwarding to the scalar oracle until the SIMD kernels land).
#include <cstring>

#include "backend/cpu/linear.h"

namespace drama::cpu {

int64_t nvfp4_prepared_floats_avx2(int64_t in) {
  return in;
}

void nvfp4_prepare_x_avx2(const float* x, int64_t rows, int64_t in, float* xp) {
  std::memcpy(xp, x, sizeof(float) * rows * in);
}

void nvfp4_linear_avx2(const LinearWeight& w, const float* xp, int64_t rows, float* y, int64_t o0,
                       int64_t o1) {
  nvfp4_linear_scalar(w, xp, rows, y, o0, o1);
}

void bf16_linear_avx2(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                      int64_t o1) {
  bf16_linear_scalar(w, x, rows, y, o0, o1);
}

}  // namespace drama::cpu

// Matrix-product kernels behind CpuBackend::linear. Each computes y[r, o] = sum_i x[r, i] w[o, i]
// for every row r < rows and the output columns o in [o0, o1) only, so threads split columns.
// Per output element the reduction order is fixed by the path alone: a row gives the same bits
// alone or inside any batch, and the column split never matters.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace drama::cpu {

// Scalar oracles: one float accumulator per element, inputs in increasing order.
void nvfp4_linear_scalar(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                         int64_t o1);
void bf16_linear_scalar(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                        int64_t o1);

// SIMD NVFP4 paths read x in a per-path order (even/odd inputs of each chunk de-interleaved to
// match the nibble split; AVX-512 as bfloat16 hi/lo pairs), prepared once per call into
// nvfp4_prepared_floats(path) floats per row.
int64_t nvfp4_prepared_floats_avx2(int64_t in);
void nvfp4_prepare_x_avx2(const float* x, int64_t rows, int64_t in, float* xp);
void nvfp4_linear_avx2(const LinearWeight& w, const float* xp, int64_t rows, float* y, int64_t o0,
                       int64_t o1);
// The AVX-512 NVFP4 path needs AVX512_BF16 and AVX512_VBMI; without them the AVX2 NVFP4 kernel
// runs.
bool nvfp4_avx512_supported();
int64_t nvfp4_prepared_floats_avx512(int64_t in);
void nvfp4_prepare_x_avx512(const float* x, int64_t rows, int64_t in, float* xp);
void nvfp4_linear_avx512(const LinearWeight& w, const float* xp, int64_t rows, float* y, int64_t o0,
                         int64_t o1);

void bf16_linear_avx2(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                      int64_t o1);
void bf16_linear_avx512(const LinearWeight& w, const float* x, int64_t rows, float* y, int64_t o0,
                        int64_t o1);

}  // namespace drama::cpu

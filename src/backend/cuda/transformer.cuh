// Embedding sums, RMSNorm, rotary embedding (and the two fused), SwiGLU and residual adds (spec
// section 1). Each output element is computed by one thread in the CPU backend's order, except
// RMSNorm's sum of squares: float64 partial sums per thread over a fixed stride, added in a fixed
// tree.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

void launch_embed_sum(const uint16_t* table, int64_t dim, const int32_t* ids, int64_t rows,
                      int64_t ids_per_row, float* out, cudaStream_t stream);
void launch_rms_norm(const float* x, const uint16_t* w, int64_t rows, int64_t dim, float eps,
                     float* y, cudaStream_t stream);
void launch_rope(float* x, int64_t rows, int64_t heads, int64_t head_dim, const int32_t* positions,
                 float theta, cudaStream_t stream);
// QK-norm, rotary and the cache stores of the attention sublayer in one launch (a block per
// (head, row)); bitwise launch_rms_norm twice, launch_rope twice and two row copies.
void launch_qk_norm_rope_cache(float* q, float* k, const float* v, int64_t rows, int64_t heads,
                               int64_t kv_heads, int64_t head_dim, const uint16_t* q_norm,
                               const uint16_t* k_norm, float eps, const int32_t* positions,
                               float theta, const int32_t* kv_row, float* k_cache, float* v_cache,
                               cudaStream_t stream);
void launch_swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
void launch_add(const float* x, int64_t n, float* y, cudaStream_t stream);
// y = 1 / (1 + exp(-x)).
void launch_sigmoid(const float* x, int64_t n, float* y, cudaStream_t stream);

}  // namespace drama::cuda

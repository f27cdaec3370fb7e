// Codec (Mimi) kernels (spec section 7). Convolutions run one thread per output element in the
// CPU backend's order (bias first, input channel ascending, then kernel tap or input step
// ascending, each term a rounded product then a rounded add: the build has no FMA contraction),
// so they give the CPU's bits. LayerNorm: float64 sums over a fixed stride and tree. Vector
// quantizer encode: blocks over (vector, slice of 256 codebook rows), one row per thread, a fixed
// tree per slice that keeps the smaller distance and, on ties, the lower index, then the slices
// merged in increasing order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

void launch_conv1d(const float* x, int64_t in_ch, int64_t len, const float* w, const float* bias,
                   int64_t out_ch, int64_t kernel, int64_t stride, int64_t dilation, int64_t groups,
                   float* y, int64_t out_len, cudaStream_t stream);
void launch_conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                             const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                             int64_t groups, float* y, cudaStream_t stream);
void launch_elu(const float* x, int64_t n, float alpha, float* y, cudaStream_t stream);
void launch_gelu(const float* x, int64_t n, float* y, cudaStream_t stream);
void launch_layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim,
                       float eps, float* y, cudaStream_t stream);
void launch_scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim, float* y,
                       cudaStream_t stream);
void launch_vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                      float* out, cudaStream_t stream);
// Bytes of the workspace launch_vq_encode needs.
int64_t vq_encode_workspace_bytes(int64_t size, int64_t n);
void launch_vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x, int64_t n,
                      int32_t* codes, void* workspace, cudaStream_t stream);

}  // namespace drama::cuda

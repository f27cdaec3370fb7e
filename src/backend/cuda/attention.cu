#include "backend/cuda/attention.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kThreads = 128;  // positions per chunk; value dimensions per pass
constexpr int kMaxHeadDim = 2 * kThreads;

__device__ float score(const float* qv, const float* kv, int64_t head_dim, float scale) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = 0.0f;
  int64_t d = 0;
  for (; d + kLanes <= head_dim; d += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += qv[d + l] * kv[d + l];
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  float dot = lane[0];
  for (; d < head_dim; ++d) dot += qv[d] * kv[d];
  return dot * scale;
}

__global__ void attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ positions,
                                 const float* __restrict__ k_cache,
                                 const float* __restrict__ v_cache, int64_t n_heads,
                                 int64_t n_kv_heads, int64_t head_dim, int64_t window, float scale,
                                 float* __restrict__ out) {
  __shared__ float p[kThreads];
  __shared__ float scratch[32];
  __shared__ float total;
  const int64_t t = blockIdx.x;  // row * n_heads + head
  const int64_t r = t / n_heads, h = t % n_heads, kvh = h / (n_heads / n_kv_heads);
  const int64_t last = positions[r];
  const int64_t first = window > 0 ? (last - window + 1 > 0 ? last - window + 1 : 0) : 0;
  const int64_t kv_stride = n_kv_heads * head_dim;
  const float* qv = q + t * head_dim;
  const float* kbase = k_cache + kvh * head_dim;
  const float* vbase = v_cache + kvh * head_dim;

  float max = -__int_as_float(0x7f800000);
  for (int64_t j = first + threadIdx.x; j <= last; j += kThreads)
    max = fmaxf(max, score(qv, kbase + j * kv_stride, head_dim, scale));
  max = block_max(max, scratch);

  float acc[2] = {0.0f, 0.0f};
  if (threadIdx.x == 0) total = 0.0f;
  for (int64_t j0 = first; j0 <= last; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    const int64_t n = last - j0 + 1 < kThreads ? last - j0 + 1 : kThreads;
    __syncthreads();  // the previous chunk's p has been read
    if (j <= last) p[threadIdx.x] = expf(score(qv, kbase + j * kv_stride, head_dim, scale) - max);
    __syncthreads();
    if (threadIdx.x == 0)
      for (int64_t i = 0; i < n; ++i) total += p[i];
    for (int part = 0; part < 2; ++part) {
      const int64_t d = threadIdx.x + part * kThreads;
      if (d >= head_dim) break;
      for (int64_t i = 0; i < n; ++i) acc[part] += p[i] * vbase[(j0 + i) * kv_stride + d];
    }
  }
  __syncthreads();
  const float inv = 1.0f / total;
  for (int part = 0; part < 2; ++part) {
    const int64_t d = threadIdx.x + part * kThreads;
    if (d < head_dim) out[t * head_dim + d] = acc[part] * inv;
  }
}

}  // namespace

void launch_attention(const float* q, int64_t rows, const int32_t* positions, const float* k_cache,
                      const float* v_cache, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      int64_t window, float* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxHeadDim)
    throw Error("CUDA attention supports head_dim up to " + std::to_string(kMaxHeadDim) + ", not " +
                std::to_string(head_dim) + ".");
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  attention_kernel<<<static_cast<unsigned>(rows * n_heads), kThreads, 0, stream>>>(
      q, positions, k_cache, v_cache, n_heads, n_kv_heads, head_dim, window, scale, out);
  check_launch("attention");
}

void CudaBackend::attention(const float* q, int64_t rows, const int32_t* positions,
                            const float* k_cache, const float* v_cache, int64_t n_heads,
                            int64_t n_kv_heads, int64_t head_dim, int64_t window, float* out) {
  launch_attention(q, rows, positions, k_cache, v_cache, n_heads, n_kv_heads, head_dim, window, out,
                   stream_);
}

}  // namespace drama::cuda

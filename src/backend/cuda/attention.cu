#include "backend/cuda/attention.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kThreads = 128;  // positions per chunk; value dimensions per pass
constexpr int kMaxHeadDim = 2 * kThreads;
constexpr int kSplits = 16;       // blocks per (row, head): a fixed split, whatever the batch
constexpr int kValuesAhead = 16;  // value loads in flight per thread

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

// Split s of (row, head) t takes the chunks c = s, s + kSplits, ... of kThreads positions of the
// row's span, in increasing c, with a running maximum m, exp-sum l and value sums acc (each
// chunk: scores, the chunk's exact maximum, rescaling by exp(m_old - m_new), the chunk's
// exponentials summed in a fixed tree, each value dimension summed in increasing position).
// It writes (m, l, acc) to partial[t][s].
__global__ void attention_split_kernel(const float* __restrict__ q,
                                       const int32_t* __restrict__ positions,
                                       const int32_t* __restrict__ cache_row0,
                                       const float* __restrict__ k_cache,
                                       const float* __restrict__ v_cache, int64_t n_heads,
                                       int64_t n_kv_heads, int64_t head_dim, int64_t window,
                                       float scale, float* __restrict__ partial) {
  __shared__ float p[kThreads];
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;  // row * n_heads + head
  const int split = blockIdx.y;
  const int64_t r = t / n_heads, h = t % n_heads, kvh = h / (n_heads / n_kv_heads);
  const int64_t last = positions[r];
  const int64_t first = window > 0 ? (last - window + 1 > 0 ? last - window + 1 : 0) : 0;
  const int64_t kv_stride = n_kv_heads * head_dim;
  const float* qv = q + t * head_dim;
  const int64_t base = (cache_row0 ? cache_row0[r] : 0) * kv_stride + kvh * head_dim;
  const float* kbase = k_cache + base;
  const float* vbase = v_cache + base;

  float m = -__int_as_float(0x7f800000), l = 0.0f;
  float acc[2] = {0.0f, 0.0f};
  for (int64_t j0 = first + static_cast<int64_t>(split) * kThreads; j0 <= last;
       j0 += static_cast<int64_t>(kSplits) * kThreads) {
    const int64_t j = j0 + threadIdx.x;
    const int64_t n = last - j0 + 1 < kThreads ? last - j0 + 1 : kThreads;
    const float sc =
        j <= last ? score(qv, kbase + j * kv_stride, head_dim, scale) : -__int_as_float(0x7f800000);
    const float m_new = fmaxf(m, block_max(sc, scratch));
    const float alpha = expf(m - m_new);  // 0 for the first chunk (m = -inf)
    const float e = j <= last ? expf(sc - m_new) : 0.0f;
    __syncthreads();  // the previous chunk's p has been read
    p[threadIdx.x] = e;
    const float chunk_sum = block_sum(e, scratch);  // synchronizes: p is complete
    l = l * alpha + chunk_sum;
    for (int part = 0; part < 2; ++part) {
      const int64_t d = threadIdx.x + part * kThreads;
      if (d >= head_dim) break;
      // kValuesAhead positions' values are loaded before they are added, in increasing position.
      float a = 0.0f;
      const float* vcol = vbase + j0 * kv_stride + d;
      for (int64_t i0 = 0; i0 < n; i0 += kValuesAhead) {
        float vv[kValuesAhead];
#pragma unroll
        for (int u = 0; u < kValuesAhead; ++u)
          vv[u] = i0 + u < n ? vcol[(i0 + u) * kv_stride] : 0.0f;
#pragma unroll
        for (int u = 0; u < kValuesAhead; ++u)
          if (i0 + u < n) a += p[i0 + u] * vv[u];
      }
      acc[part] = acc[part] * alpha + a;
    }
    m = m_new;
  }
  float* out = partial + (t * kSplits + split) * (head_dim + 2);
  if (threadIdx.x == 0) {
    out[0] = m;
    out[1] = l;
  }
  for (int part = 0; part < 2; ++part) {
    const int64_t d = threadIdx.x + part * kThreads;
    if (d < head_dim) out[2 + d] = acc[part];
  }
}

// out[t] = sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M), splits in increasing s.
__global__ void attention_combine_kernel(const float* __restrict__ partial, int64_t head_dim,
                                         float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const float* pt = partial + t * kSplits * (head_dim + 2);
  float big = -__int_as_float(0x7f800000);
  for (int s = 0; s < kSplits; ++s) big = fmaxf(big, pt[s * (head_dim + 2)]);
  float l = 0.0f;
  float w[kSplits];
  for (int s = 0; s < kSplits; ++s) {
    const float ms = pt[s * (head_dim + 2)];
    w[s] = ms == -__int_as_float(0x7f800000) ? 0.0f : expf(ms - big);
    l += pt[s * (head_dim + 2) + 1] * w[s];
  }
  const float inv = 1.0f / l;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < kSplits; ++s) o += pt[s * (head_dim + 2) + 2 + d] * w[s];
    out[t * head_dim + d] = o * inv;
  }
}

}  // namespace

int64_t attention_partial_floats(int64_t rows, int64_t n_heads, int64_t head_dim) {
  return rows * n_heads * kSplits * (head_dim + 2);
}

void launch_attention(const float* q, int64_t rows, const int32_t* positions,
                      const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                      float* out, float* partial, cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxHeadDim)
    throw Error("CUDA attention supports head_dim up to " + std::to_string(kMaxHeadDim) + ", not " +
                std::to_string(head_dim) + ".");
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const dim3 grid(static_cast<unsigned>(rows * n_heads), kSplits);
  attention_split_kernel<<<grid, kThreads, 0, stream>>>(q, positions, cache_row0, k_cache, v_cache,
                                                        n_heads, n_kv_heads, head_dim, window,
                                                        scale, partial);
  check_launch("attention");
  attention_combine_kernel<<<static_cast<unsigned>(rows * n_heads), kThreads, 0, stream>>>(
      partial, head_dim, out);
  check_launch("attention combine");
}

void CudaBackend::attention(const float* q, int64_t rows, const int32_t* positions,
                            const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                            int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                            float* out) {
  float* partial = static_cast<float*>(scratch(
      static_cast<size_t>(attention_partial_floats(rows, n_heads, head_dim)) * sizeof(float)));
  launch_attention(q, rows, positions, cache_row0, k_cache, v_cache, n_heads, n_kv_heads, head_dim,
                   window, out, partial, stream_);
}

}  // namespace drama::cuda

#include "backend/cuda/attention.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps; value dimensions per pass
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;                 // positions per chunk
constexpr int kPerWarp = kChunk / kWarps;  // positions whose scores a warp forms per chunk
constexpr int kMaxHeadDim = 2 * kThreads;
constexpr int kDimsPerLane = kMaxHeadDim / 32;
constexpr int kSplits = 16;  // blocks per (row, head): a fixed split, whatever the batch

// out[t] = sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M) over the `used` splits that hold
// positions, in increasing s, by the block of the split that finished last (its loads through L2:
// the other splits wrote them).
__device__ void merge_splits(const float* pt, int64_t head_dim, int used, float* out) {
  float big = -__int_as_float(0x7f800000);
  for (int s = 0; s < used; ++s) big = fmaxf(big, __ldcg(pt + s * (head_dim + 2)));
  float l = 0.0f;
  float w[kSplits];
  for (int s = 0; s < used; ++s) {
    const float ms = __ldcg(pt + s * (head_dim + 2));
    w[s] = ms == -__int_as_float(0x7f800000) ? 0.0f : expf(ms - big);
    l += __ldcg(pt + s * (head_dim + 2) + 1) * w[s];
  }
  const float inv = 1.0f / l;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s) o += __ldcg(pt + s * (head_dim + 2) + 2 + d) * w[s];
    out[d] = o * inv;
  }
}

// Split s of (row, head) t takes the chunks c = s, s + kSplits, ... of kChunk positions of the
// row's span (from its window's first position), in increasing c, with a running maximum m,
// exp-sum l and value sums acc. Per chunk:
// - score of position j (warp w forms those of positions w * kPerWarp + u): lane l sums
//   q[d] k[d] for d = l, l + 32, ... < head_dim in increasing d with fmaf, then warp_sum's fixed
//   butterfly, times 1/sqrt(head_dim);
// - warp 0: the chunk's exact maximum, m_new = max(m, it), e_i = exp(score_i - m_new), and their
//   sum by warp_sum (lane i holds e_i);
// - l = l exp(m - m_new) + that sum; value dimension d: a = sum_i e_i v_i[d] with fmaf in
//   increasing position, acc = acc exp(m - m_new) + a.
// Every operation is fixed by the row's own position and window, never by the batch. Loads go
// ahead of their arithmetic: a chunk's values (first pass) are requested before its scores.
// It writes (m, l, acc) to partial[t][s]. A split past the row's chunks (a span of fewer than
// kSplits chunks) has nothing to add and returns at once: the row's own span says how many
// splits hold positions, and the last of those merges.
__global__ void attention_split_kernel(const float* __restrict__ q,
                                       const int32_t* __restrict__ positions,
                                       const int32_t* __restrict__ cache_row0,
                                       const float* __restrict__ k_cache,
                                       const float* __restrict__ v_cache, int64_t n_heads,
                                       int64_t n_kv_heads, int64_t head_dim, int64_t window,
                                       float scale, float* __restrict__ partial,
                                       unsigned* __restrict__ counters, float* __restrict__ out) {
  pdl_entry();
  __shared__ float p[kChunk];
  __shared__ float scores[kChunk];
  __shared__ float stats[3];     // m_new, exp(m - m_new), the chunk's exp sum
  const int64_t t = blockIdx.x;  // row * n_heads + head
  const int split = blockIdx.y;
  const int64_t r = t / n_heads, h = t % n_heads, kvh = h / (n_heads / n_kv_heads);
  const int64_t last = positions[r];
  const int64_t first = window > 0 ? (last - window + 1 > 0 ? last - window + 1 : 0) : 0;
  const int64_t chunks = (last - first + kChunk) / kChunk;
  const int used = static_cast<int>(chunks < kSplits ? chunks : kSplits);
  if (split >= used) return;  // the whole block
  const int64_t kv_stride = n_kv_heads * head_dim;
  const float* qv = q + t * head_dim;
  const int64_t base = (cache_row0 ? cache_row0[r] : 0) * kv_stride + kvh * head_dim;
  const float* kbase = k_cache + base;
  const float* vbase = v_cache + base;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float qreg[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qreg[i] = d < head_dim ? qv[d] : 0.0f;
  }

  float m = -__int_as_float(0x7f800000), l = 0.0f;
  float acc[2] = {0.0f, 0.0f};
  for (int64_t j0 = first + static_cast<int64_t>(split) * kChunk; j0 <= last;
       j0 += static_cast<int64_t>(kSplits) * kChunk) {
    const int n = static_cast<int>(last - j0 + 1 < kChunk ? last - j0 + 1 : kChunk);
    // The first pass's values of the chunk, requested before anything waits on them.
    float vv[kChunk];
    const int64_t d0 = threadIdx.x;
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      vv[i] = i < n && d0 < head_dim ? vbase[(j0 + i) * kv_stride + d0] : 0.0f;
    float kv[kPerWarp][kDimsPerLane];
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u)
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int pos = warp * kPerWarp + u;
        const int64_t d = lane + 32 * i;
        kv[u][i] = pos < n && d < head_dim ? kbase[(j0 + pos) * kv_stride + d] : 0.0f;
      }
    __syncthreads();  // the previous chunk's scores, p and stats have been read
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i)
        if (lane + 32 * i < head_dim) dot = fmaf(qreg[i], kv[u][i], dot);
      dot = warp_sum(dot);
      if (lane == 0) scores[warp * kPerWarp + u] = dot * scale;
    }
    __syncthreads();
    if (warp == 0) {
      const float sc = lane < n ? scores[lane] : -__int_as_float(0x7f800000);
      const float m_new = fmaxf(m, warp_max(sc));
      const float e = lane < n ? expf(sc - m_new) : 0.0f;
      p[lane] = e;
      const float sum = warp_sum(e);
      if (lane == 0) {
        stats[0] = m_new;
        stats[1] = expf(m - m_new);  // 0 for the first chunk (m = -inf)
        stats[2] = sum;
      }
    }
    __syncthreads();
    const float m_new = stats[0], alpha = stats[1];
    l = l * alpha + stats[2];
    for (int part = 0; part < 2; ++part) {
      const int64_t d = threadIdx.x + part * kThreads;
      if (d >= head_dim) break;
      if (part == 1) {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) vv[i] = i < n ? vbase[(j0 + i) * kv_stride + d] : 0.0f;
      }
      float a = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        if (i < n) a = fmaf(p[i], vv[i], a);
      acc[part] = acc[part] * alpha + a;
    }
    m = m_new;
  }
  float* mine = partial + (t * kSplits + split) * (head_dim + 2);
  if (threadIdx.x == 0) {
    mine[0] = m;
    mine[1] = l;
  }
  for (int part = 0; part < 2; ++part) {
    const int64_t d = threadIdx.x + part * kThreads;
    if (d < head_dim) mine[2 + d] = acc[part];
  }
  // The last of the `used` blocks of (row, head) t merges them (whichever it is, it reads the
  // same partials in the same order) and sets the counter back to 0 for the next call.
  __shared__ bool merges;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) merges = atomicAdd(counters + t, 1u) == static_cast<unsigned>(used - 1);
  __syncthreads();
  if (!merges) return;
  __threadfence();
  merge_splits(partial + t * kSplits * (head_dim + 2), head_dim, used, out + t * head_dim);
  if (threadIdx.x == 0) counters[t] = 0;
}

}  // namespace

int64_t attention_partial_floats(int64_t rows, int64_t n_heads, int64_t head_dim) {
  return rows * n_heads * kSplits * (head_dim + 2);
}

void launch_attention(const float* q, int64_t rows, const int32_t* positions,
                      const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                      float* out, float* partial, unsigned* counters, cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxHeadDim)
    throw Error("CUDA attention supports head_dim up to " + std::to_string(kMaxHeadDim) + ", not " +
                std::to_string(head_dim) + ".");
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const dim3 grid(static_cast<unsigned>(rows * n_heads), kSplits);
  launch(attention_split_kernel, grid, kThreads, 0, stream, q, positions, cache_row0, k_cache,
         v_cache, n_heads, n_kv_heads, head_dim, window, scale, partial, counters, out);
  check_launch("attention");
}

void CudaBackend::attention(const float* q, int64_t rows, const int32_t* positions,
                            const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                            int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                            float* out) {
  float* partial = static_cast<float*>(scratch(
      static_cast<size_t>(attention_partial_floats(rows, n_heads, head_dim)) * sizeof(float)));
  unsigned* done = counters(static_cast<size_t>(rows * n_heads));
  launch_attention(q, rows, positions, cache_row0, k_cache, v_cache, n_heads, n_kv_heads, head_dim,
                   window, out, partial, done, stream_);
}

}  // namespace drama::cuda

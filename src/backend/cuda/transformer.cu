#include "backend/cuda/transformer.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void embed_sum_kernel(const uint16_t* __restrict__ table, int64_t dim,
                                 const int32_t* __restrict__ ids, int64_t rows, int64_t ids_per_row,
                                 float* __restrict__ out) {
  pdl_entry();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * dim) return;
  const int64_t r = t / dim, d = t % dim;
  float acc = 0.0f;
  for (int64_t j = 0; j < ids_per_row; ++j)
    acc += bf16_to_f32(table[static_cast<int64_t>(ids[r * ids_per_row + j]) * dim + d]);
  out[t] = acc;
}

// One block per row: thread t sums x[d]^2 for d = t, t + blockDim, ... in float64, in increasing
// d, then block_sum's fixed tree. PerThread > 0: dim <= PerThread * blockDim, and the row and the
// weights are loaded once, before the reduction, into registers (one memory round trip instead
// of two; the same operations on the same values); PerThread = 0: any dim, read twice.
template <int PerThread>
__global__ void rms_norm_kernel(const float* x, const uint16_t* __restrict__ w, int64_t dim,
                                float eps, float* y) {
  __shared__ double scratch[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  if constexpr (PerThread > 0) {
    float xv[PerThread], wv[PerThread];
    // The weights before the wait for the kernel before (they are not its output), the row after.
#pragma unroll
    for (int i = 0; i < PerThread; ++i) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      wv[i] = d < dim ? bf16_to_f32(w[d]) : 0.0f;
    }
    pdl_entry();
#pragma unroll
    for (int i = 0; i < PerThread; ++i) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      xv[i] = d < dim ? xr[d] : 0.0f;
    }
    norm_row_in_registers(xv, wv, dim, eps, scratch, yr);
  } else {
    pdl_entry();
    norm_row_reread([xr](int64_t d) { return xr[d]; }, w, dim, eps, scratch, yr);
  }
}

// Rotary of the pair (a, b) = (v[i], v[i + half]) at `position`: the angle in float64 (as
// tools/reference), applied in float32. rope_kernel and qk_norm_rope_cache_kernel both rotate
// through these functions, so their bits agree: the frequency (from the shapes alone, so a kernel
// may compute it before waiting for its inputs), its cosine and sine at a position, the rotation.
__device__ __forceinline__ double rope_inv_freq(int64_t i, int64_t head_dim, double theta) {
  return pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
}
__device__ __forceinline__ void rope_cos_sin(int32_t position, double inv_freq, float& c,
                                             float& s) {
  const double angle = static_cast<double>(position) * inv_freq;
  c = static_cast<float>(cos(angle));
  s = static_cast<float>(sin(angle));
}
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float& ya,
                                            float& yb) {
  ya = a * c - b * s;
  yb = b * c + a * s;
}
__device__ __forceinline__ void rope_pair(float a, float b, int32_t position, int64_t i,
                                          int64_t head_dim, double theta, float& ya, float& yb) {
  float c, s;
  rope_cos_sin(position, rope_inv_freq(i, head_dim, theta), c, s);
  rope_rotate(a, b, c, s, ya, yb);
}

// One thread per (row, frequency i, head): the pair (i, i + half).
__global__ void rope_kernel(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                            const int32_t* __restrict__ positions, double theta) {
  pdl_entry();
  const int64_t half = head_dim / 2;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * heads * half) return;
  const int64_t i = t % half, h = (t / half) % heads, r = t / (half * heads);
  float* v = x + (r * heads + h) * head_dim;
  rope_pair(v[i], v[i + half], positions[r], i, head_dim, theta, v[i], v[i + half]);
}

// qk_norm_rope_cache in one launch: block (h, r) takes head h of row r, q's heads first, then
// k's; thread d holds element d. The RMS norm is rms_norm_kernel's: the square in float64 per
// element, block_sum's fixed tree (a block of head_dim threads rounded up to a warp gives the
// same tree as rms_norm's 256 threads, whose extra threads add zeros), inv_rms, (x * inv) * w;
// the rotary is rope_pair's; a k head's rotated values and its v head go into the caches. The
// norm's weight and the rotary's frequency are computed before the wait for the kernel before (they
// depend on no kernel's output); after it every load is issued at once (the head, its position,
// the cache row, the v head), and the cosine and sine are computed before the norm's reduction.
constexpr int kMaxHeadDim = 1024;
__global__ void qk_norm_rope_cache_kernel(float* q, float* k, const float* __restrict__ v,
                                          int64_t heads, int64_t kv_heads, int64_t head_dim,
                                          const uint16_t* __restrict__ q_norm,
                                          const uint16_t* __restrict__ k_norm, float eps,
                                          const int32_t* __restrict__ positions, double theta,
                                          const int32_t* __restrict__ kv_row, float* k_cache,
                                          float* v_cache) {
  __shared__ double scratch[32];
  __shared__ float normed[kMaxHeadDim];
  const int64_t h = blockIdx.x, r = blockIdx.y, d = threadIdx.x;
  const bool is_q = h < heads;
  const int64_t kh = h - heads;  // the k head (is_q false)
  float* x = is_q ? q + (r * heads + h) * head_dim : k + (r * kv_heads + kh) * head_dim;
  const uint16_t* w = is_q ? q_norm : k_norm;
  const int64_t half = head_dim / 2, kvd = kv_heads * head_dim;
  const float wv = d < head_dim ? bf16_to_f32(w[d]) : 0.0f;
  const double inv_freq = d < half ? rope_inv_freq(d, head_dim, theta) : 0.0;
  pdl_entry();
  const float xv = d < head_dim ? x[d] : 0.0f;
  const int32_t position = positions[r];
  const int64_t cache_row = is_q ? 0 : kv_row[r];
  const float vv = !is_q && d < head_dim ? v[(r * kv_heads + kh) * head_dim + d] : 0.0f;
  float c = 0.0f, s = 0.0f;
  if (d < half) rope_cos_sin(position, inv_freq, c, s);
  double sum = 0.0;
  if (d < head_dim) sum += static_cast<double>(xv) * xv;
  const float inv = inv_rms(block_sum(sum, scratch), head_dim, eps);
  if (d < head_dim) normed[d] = (xv * inv) * wv;
  __syncthreads();
  if (d < half) {
    float ya, yb;
    rope_rotate(normed[d], normed[d + half], c, s, ya, yb);
    x[d] = ya;
    x[d + half] = yb;
    if (!is_q) {
      float* kc = k_cache + cache_row * kvd + kh * head_dim;
      kc[d] = ya;
      kc[d + half] = yb;
    }
  }
  if (!is_q && d < head_dim) v_cache[cache_row * kvd + kh * head_dim + d] = vv;
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void add_kernel(const float* x, int64_t n, float* y) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void sigmoid_kernel(const float* x, int64_t n, float* y) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

}  // namespace

void launch_sigmoid(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  launch(sigmoid_kernel, blocks_for(n, kThreads), kThreads, 0, stream, x, n, y);
  check_launch("sigmoid");
}

void launch_embed_sum(const uint16_t* table, int64_t dim, const int32_t* ids, int64_t rows,
                      int64_t ids_per_row, float* out, cudaStream_t stream) {
  if (rows * dim <= 0) return;
  launch(embed_sum_kernel, blocks_for(rows * dim, kThreads), kThreads, 0, stream, table, dim, ids,
         rows, ids_per_row, out);
  check_launch("embed_sum");
}

void launch_rms_norm(const float* x, const uint16_t* w, int64_t rows, int64_t dim, float eps,
                     float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (dim <= 8 * kRowNormThreads)
    launch(rms_norm_kernel<8>, grid, kRowNormThreads, 0, stream, x, w, dim, eps, y);
  else if (dim <= 16 * kRowNormThreads)
    launch(rms_norm_kernel<16>, grid, kRowNormThreads, 0, stream, x, w, dim, eps, y);
  else
    launch(rms_norm_kernel<0>, grid, kRowNormThreads, 0, stream, x, w, dim, eps, y);
  check_launch("rms_norm");
}

void launch_rope(float* x, int64_t rows, int64_t heads, int64_t head_dim, const int32_t* positions,
                 float theta, cudaStream_t stream) {
  const int64_t n = rows * heads * (head_dim / 2);
  if (n <= 0) return;
  launch(rope_kernel, blocks_for(n, kThreads), kThreads, 0, stream, x, rows, heads, head_dim,
         positions, static_cast<double>(theta));
  check_launch("rope");
}

void launch_qk_norm_rope_cache(float* q, float* k, const float* v, int64_t rows, int64_t heads,
                               int64_t kv_heads, int64_t head_dim, const uint16_t* q_norm,
                               const uint16_t* k_norm, float eps, const int32_t* positions,
                               float theta, const int32_t* kv_row, float* k_cache, float* v_cache,
                               cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxHeadDim || head_dim % 2 != 0)
    throw Error("qk_norm_rope_cache: head_dim " + std::to_string(head_dim) +
                " is not even and at most " + std::to_string(kMaxHeadDim));
  const dim3 grid(static_cast<unsigned>(heads + kv_heads), static_cast<unsigned>(rows));
  const unsigned threads = static_cast<unsigned>((head_dim + 31) / 32 * 32);
  launch(qk_norm_rope_cache_kernel, grid, threads, 0, stream, q, k, v, heads, kv_heads, head_dim,
         q_norm, k_norm, eps, positions, static_cast<double>(theta), kv_row, k_cache, v_cache);
  check_launch("qk_norm_rope_cache");
}

void launch_swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch(swiglu_kernel, blocks_for(n, kThreads), kThreads, 0, stream, gate, up, n, out);
  check_launch("swiglu");
}

void launch_add(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  launch(add_kernel, blocks_for(n, kThreads), kThreads, 0, stream, x, n, y);
  check_launch("add");
}

void CudaBackend::embed_sum(const uint16_t* table_bf16, int64_t dim, const int32_t* ids,
                            int64_t rows, int64_t ids_per_row, float* out) {
  launch_embed_sum(table_bf16, dim, ids, rows, ids_per_row, out, stream_);
}
void CudaBackend::rms_norm(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t dim,
                           float eps, float* y) {
  launch_rms_norm(x, w_bf16, rows, dim, eps, y, stream_);
}
void CudaBackend::rope(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                       const int32_t* positions, float theta) {
  launch_rope(x, rows, heads, head_dim, positions, theta, stream_);
}
void CudaBackend::qk_norm_rope_cache(float* q, float* k, const float* v, int64_t rows,
                                     int64_t heads, int64_t kv_heads, int64_t head_dim,
                                     const uint16_t* q_norm, const uint16_t* k_norm, float eps,
                                     const int32_t* positions, float theta, const int32_t* kv_row,
                                     float* k_cache, float* v_cache) {
  launch_qk_norm_rope_cache(q, k, v, rows, heads, kv_heads, head_dim, q_norm, k_norm, eps,
                            positions, theta, kv_row, k_cache, v_cache, stream_);
}
void CudaBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  launch_swiglu(gate, up, n, out, stream_);
}
void CudaBackend::add(const float* x, int64_t n, float* y) {
  launch_add(x, n, y, stream_);
}
void CudaBackend::sigmoid(const float* x, int64_t n, float* y) {
  launch_sigmoid(x, n, y, stream_);
}

}  // namespace drama::cuda

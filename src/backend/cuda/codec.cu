#include "backend/cuda/codec.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

namespace drama::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void conv1d_kernel(const float* __restrict__ x, int64_t len, const float* __restrict__ w,
                              const float* __restrict__ bias, int64_t out_ch, int64_t in_per_group,
                              int64_t out_per_group, int64_t kernel, int64_t stride,
                              int64_t dilation, float* __restrict__ y, int64_t out_len) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= out_ch * out_len) return;
  const int64_t o = e / out_len, t = e % out_len, g = o / out_per_group;
  const float* xg = x + g * in_per_group * len + t * stride;
  const float* wo = w + o * in_per_group * kernel;
  float acc = bias ? bias[o] : 0.0f;
  for (int64_t c = 0; c < in_per_group; ++c)
    for (int64_t j = 0; j < kernel; ++j) acc += wo[c * kernel + j] * xg[c * len + j * dilation];
  y[e] = acc;
}

__global__ void conv_transpose1d_kernel(const float* __restrict__ x, int64_t len,
                                        const float* __restrict__ w, const float* __restrict__ bias,
                                        int64_t out_ch, int64_t in_per_group, int64_t out_per_group,
                                        int64_t kernel, int64_t stride, float* __restrict__ y,
                                        int64_t out_len) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= out_ch * out_len) return;
  const int64_t o = e / out_len, u = e % out_len, g = o / out_per_group, ol = o % out_per_group;
  // Input steps t with 0 <= u - t * stride < kernel, ascending.
  const int64_t lo = u - kernel + 1 > 0 ? (u - kernel + 1 + stride - 1) / stride : 0;
  const int64_t hi = u / stride < len - 1 ? u / stride : len - 1;
  float acc = bias ? bias[o] : 0.0f;
  for (int64_t c = 0; c < in_per_group; ++c) {
    const int64_t ci = g * in_per_group + c;
    const float* xc = x + ci * len;
    const float* wc = w + (ci * out_per_group + ol) * kernel;
    for (int64_t t = lo; t <= hi; ++t) acc += xc[t] * wc[u - t * stride];
  }
  y[e] = acc;
}

__global__ void elu_kernel(const float* x, int64_t n, float alpha, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  y[i] = v > 0.0f ? v : alpha * static_cast<float>(expm1(static_cast<double>(v)));
}

__global__ void gelu_kernel(const float* x, int64_t n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
}

// One block per row.
__global__ void layer_norm_kernel(const float* x, const float* __restrict__ w,
                                  const float* __restrict__ b, int64_t dim, float eps, float* y) {
  __shared__ double scratch[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  double sum = 0.0;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) sum += xr[d];
  sum = block_sum(sum, scratch);
  const double mean = sum / static_cast<double>(dim);
  double var = 0.0;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) var += (xr[d] - mean) * (xr[d] - mean);
  var = block_sum(var, scratch);
  const float m = static_cast<float>(mean);
  const float inv = static_cast<float>(1.0 / sqrt(var / static_cast<double>(dim) + eps));
  __syncthreads();  // y may equal x
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) yr[d] = (xr[d] - m) * inv * w[d] + b[d];
}

__global__ void scale_rows_kernel(const float* x, const float* __restrict__ scale, int64_t rows,
                                  int64_t dim, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * dim) y[i] = x[i] * scale[i % dim];
}

__global__ void vq_decode_kernel(const float* __restrict__ codebook, int64_t dim,
                                 const int32_t* __restrict__ codes, int64_t n,
                                 float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * dim) out[i] = codebook[static_cast<int64_t>(codes[i / dim]) * dim + i % dim];
}

// One block per vector.
__global__ void vq_encode_kernel(const float* __restrict__ codebook, int64_t size, int64_t dim,
                                 const float* __restrict__ x, int32_t* __restrict__ codes) {
  __shared__ float best_dist[kThreads];
  __shared__ int32_t best_index[kThreads];
  const float* xt = x + static_cast<int64_t>(blockIdx.x) * dim;
  float best = __int_as_float(0x7f800000);
  int32_t index = -1;
  for (int64_t c = threadIdx.x; c < size; c += blockDim.x) {
    const float* row = codebook + c * dim;
    float dist = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dist += (xt[d] - row[d]) * (xt[d] - row[d]);
    if (dist < best) {
      best = dist;
      index = static_cast<int32_t>(c);
    }
  }
  best_dist[threadIdx.x] = best;
  best_index[threadIdx.x] = index;
  for (int width = kThreads / 2; width >= 1; width /= 2) {
    __syncthreads();
    if (threadIdx.x < width) {
      const float od = best_dist[threadIdx.x + width];
      const int32_t oi = best_index[threadIdx.x + width];
      const int32_t mi = best_index[threadIdx.x];
      if (oi >= 0 &&
          (mi < 0 || od < best_dist[threadIdx.x] || (od == best_dist[threadIdx.x] && oi < mi))) {
        best_dist[threadIdx.x] = od;
        best_index[threadIdx.x] = oi;
      }
    }
  }
  if (threadIdx.x == 0) codes[blockIdx.x] = best_index[0] < 0 ? 0 : best_index[0];
}

}  // namespace

void launch_conv1d(const float* x, int64_t in_ch, int64_t len, const float* w, const float* bias,
                   int64_t out_ch, int64_t kernel, int64_t stride, int64_t dilation, int64_t groups,
                   float* y, int64_t out_len, cudaStream_t stream) {
  const int64_t n = out_ch * out_len;
  if (n <= 0) return;
  conv1d_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      x, len, w, bias, out_ch, in_ch / groups, out_ch / groups, kernel, stride, dilation, y,
      out_len);
  check_launch("conv1d");
}

void launch_conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                             const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                             int64_t groups, float* y, cudaStream_t stream) {
  const int64_t out_len = (len - 1) * stride + kernel;
  const int64_t n = out_ch * out_len;
  if (len <= 0 || n <= 0) return;
  conv_transpose1d_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      x, len, w, bias, out_ch, in_ch / groups, out_ch / groups, kernel, stride, y, out_len);
  check_launch("conv_transpose1d");
}

void launch_elu(const float* x, int64_t n, float alpha, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  elu_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, n, alpha, y);
  check_launch("elu");
}

void launch_gelu(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, n, y);
  check_launch("gelu");
}

void launch_layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim,
                       float eps, float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, dim, eps, y);
  check_launch("layer_norm");
}

void launch_scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim, float* y,
                       cudaStream_t stream) {
  if (rows * dim <= 0) return;
  scale_rows_kernel<<<blocks_for(rows * dim, kThreads), kThreads, 0, stream>>>(x, scale, rows, dim,
                                                                               y);
  check_launch("scale_rows");
}

void launch_vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                      float* out, cudaStream_t stream) {
  if (n * dim <= 0) return;
  vq_decode_kernel<<<blocks_for(n * dim, kThreads), kThreads, 0, stream>>>(codebook, dim, codes, n,
                                                                           out);
  check_launch("vq_decode");
}

void launch_vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x, int64_t n,
                      int32_t* codes, cudaStream_t stream) {
  if (n <= 0) return;
  vq_encode_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(codebook, size, dim, x,
                                                                      codes);
  check_launch("vq_encode");
}

void CudaBackend::conv1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                         const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                         int64_t dilation, int64_t groups, float* y, int64_t out_len) {
  launch_conv1d(x, in_ch, len, w, bias, out_ch, kernel, stride, dilation, groups, y, out_len,
                stream_);
}
void CudaBackend::conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                                   const float* bias, int64_t out_ch, int64_t kernel,
                                   int64_t stride, int64_t groups, float* y) {
  launch_conv_transpose1d(x, in_ch, len, w, bias, out_ch, kernel, stride, groups, y, stream_);
}
void CudaBackend::elu(const float* x, int64_t n, float alpha, float* y) {
  launch_elu(x, n, alpha, y, stream_);
}
void CudaBackend::gelu(const float* x, int64_t n, float* y) {
  launch_gelu(x, n, y, stream_);
}
void CudaBackend::layer_norm(const float* x, const float* w, const float* b, int64_t rows,
                             int64_t dim, float eps, float* y) {
  launch_layer_norm(x, w, b, rows, dim, eps, y, stream_);
}
void CudaBackend::scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim,
                             float* y) {
  launch_scale_rows(x, scale, rows, dim, y, stream_);
}
void CudaBackend::vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                            float* out) {
  launch_vq_decode(codebook, dim, codes, n, out, stream_);
}
void CudaBackend::vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x,
                            int64_t n, int32_t* codes) {
  launch_vq_encode(codebook, size, dim, x, n, codes, stream_);
}

}  // namespace drama::cuda

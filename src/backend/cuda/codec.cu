#include "backend/cuda/codec.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

namespace drama::cuda {

namespace {

constexpr int kThreads = 256;

// Taps > 0: the kernel width known at compile time (Mimi's 1, 3, 7), so each input channel's taps
// unroll and four channels' loads issue together; Taps = 0: any width. Same order either way.
template <int Taps>
__global__ void conv1d_kernel(const float* __restrict__ x, int64_t len, const float* __restrict__ w,
                              const float* __restrict__ bias, int64_t out_ch, int64_t in_per_group,
                              int64_t out_per_group, int64_t kernel, int64_t stride,
                              int64_t dilation, float* __restrict__ y, int64_t out_len) {
  pdl_entry();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= out_ch * out_len) return;
  const int64_t o = e / out_len, t = e % out_len, g = o / out_per_group;
  const float* xp = x + g * in_per_group * len + t * stride;
  const float* wp = w + o * in_per_group * kernel;
  const int taps = Taps > 0 ? Taps : static_cast<int>(kernel), step = static_cast<int>(dilation);
  const int channels = static_cast<int>(in_per_group), row = static_cast<int>(len);
  float acc = bias ? bias[o] : 0.0f;
#pragma unroll 4
  for (int c = 0; c < channels; ++c) {
    const float* wc = wp + c * taps;
    const float* xc = xp + static_cast<int64_t>(c) * row;
    if constexpr (Taps > 0) {
#pragma unroll
      for (int j = 0; j < Taps; ++j) acc += wc[j] * xc[j * step];
    } else {
      for (int j = 0; j < taps; ++j) acc += wc[j] * xc[j * step];
    }
  }
  y[e] = acc;
}

// MaxSteps > 0: at most that many input steps reach an output (ceil(kernel / stride)), taken
// predicated and unrolled with four channels' loads in flight; 0: any. Same order either way.
template <int MaxSteps>
__global__ void conv_transpose1d_kernel(const float* __restrict__ x, int64_t len,
                                        const float* __restrict__ w, const float* __restrict__ bias,
                                        int64_t out_ch, int64_t in_per_group, int64_t out_per_group,
                                        int64_t kernel, int64_t stride, float* __restrict__ y,
                                        int64_t out_len) {
  pdl_entry();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= out_ch * out_len) return;
  const int64_t o = e / out_len, u = e % out_len, g = o / out_per_group, ol = o % out_per_group;
  // Input steps t with 0 <= u - t * stride < kernel, ascending.
  const int64_t lo = u - kernel + 1 > 0 ? (u - kernel + 1 + stride - 1) / stride : 0;
  const int64_t hi = u / stride < len - 1 ? u / stride : len - 1;
  float acc = bias ? bias[o] : 0.0f;
  const float* xc = x + g * in_per_group * len + lo;
  const float* wc = w + (g * in_per_group * out_per_group + ol) * kernel + (u - lo * stride);
  const int64_t w_step = out_per_group * kernel;
  const int count = static_cast<int>(hi - lo + 1), tap_step = static_cast<int>(stride);
  const int channels = static_cast<int>(in_per_group), row = static_cast<int>(len);
#pragma unroll 4
  for (int c = 0; c < channels; ++c) {
    const float* xs = xc + static_cast<int64_t>(c) * row;
    const float* ws = wc + c * w_step;
    if constexpr (MaxSteps > 0) {
#pragma unroll
      for (int i = 0; i < MaxSteps; ++i)
        if (i < count) acc += xs[i] * ws[-i * tap_step];
    } else {
      for (int i = 0; i < count; ++i) acc += xs[i] * ws[-i * tap_step];
    }
  }
  y[e] = acc;
}

__global__ void elu_kernel(const float* x, int64_t n, float alpha, float* y) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  y[i] = v > 0.0f ? v : alpha * static_cast<float>(expm1(static_cast<double>(v)));
}

__global__ void gelu_kernel(const float* x, int64_t n, float* y) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
}

// One block per row.
__global__ void layer_norm_kernel(const float* x, const float* __restrict__ w,
                                  const float* __restrict__ b, int64_t dim, float eps, float* y) {
  pdl_entry();
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
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * dim) y[i] = x[i] * scale[i % dim];
}

__global__ void vq_decode_kernel(const float* __restrict__ codebook, int64_t dim,
                                 const int32_t* __restrict__ codes, int64_t n,
                                 float* __restrict__ out) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * dim) out[i] = codebook[static_cast<int64_t>(codes[i / dim]) * dim + i % dim];
}

// Block (t, slice): codebook rows [slice * kThreads, +kThreads), one per thread, each distance
// summed over d in increasing order (no FMA: the CPU backend's bits); then a fixed tree keeps the
// smaller distance, on ties the lower index, into best[t][slice].
__global__ void vq_encode_slice_kernel(const float* __restrict__ codebook, int64_t size,
                                       int64_t dim, const float* __restrict__ x,
                                       float* __restrict__ best_dist,
                                       int32_t* __restrict__ best_index) {
  pdl_entry();
  __shared__ float dist_s[kThreads];
  __shared__ int32_t index_s[kThreads];
  const float* xt = x + static_cast<int64_t>(blockIdx.x) * dim;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  float dist = __int_as_float(0x7f800000);
  int32_t index = -1;
  if (c < size) {
    const float* row = codebook + c * dim;
    float d2 = 0.0f;
    for (int64_t d = 0; d < dim; ++d) d2 += (xt[d] - row[d]) * (xt[d] - row[d]);
    if (d2 < dist) {  // a NaN distance is never chosen (as the CPU's strict <)
      dist = d2;
      index = static_cast<int32_t>(c);
    }
  }
  dist_s[threadIdx.x] = dist;
  index_s[threadIdx.x] = index;
  for (int width = kThreads / 2; width >= 1; width /= 2) {
    __syncthreads();
    if (threadIdx.x < width) {
      const float od = dist_s[threadIdx.x + width];
      const int32_t oi = index_s[threadIdx.x + width];
      const int32_t mi = index_s[threadIdx.x];
      if (oi >= 0 &&
          (mi < 0 || od < dist_s[threadIdx.x] || (od == dist_s[threadIdx.x] && oi < mi))) {
        dist_s[threadIdx.x] = od;
        index_s[threadIdx.x] = oi;
      }
    }
  }
  if (threadIdx.x == 0) {
    best_dist[blockIdx.x * gridDim.y + blockIdx.y] = dist_s[0];
    best_index[blockIdx.x * gridDim.y + blockIdx.y] = index_s[0];
  }
}

// codes[t] = the best of t's slices in increasing slice order (strictly smaller wins).
__global__ void vq_encode_merge_kernel(const float* __restrict__ best_dist,
                                       const int32_t* __restrict__ best_index, int64_t n,
                                       int64_t slices, int32_t* __restrict__ codes) {
  pdl_entry();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  float dist = __int_as_float(0x7f800000);
  int32_t index = -1;
  for (int64_t s = 0; s < slices; ++s) {
    const int32_t i = best_index[t * slices + s];
    if (i >= 0 && (index < 0 || best_dist[t * slices + s] < dist)) {
      dist = best_dist[t * slices + s];
      index = i;
    }
  }
  codes[t] = index < 0 ? 0 : index;
}

}  // namespace

void launch_conv1d(const float* x, int64_t in_ch, int64_t len, const float* w, const float* bias,
                   int64_t out_ch, int64_t kernel, int64_t stride, int64_t dilation, int64_t groups,
                   float* y, int64_t out_len, cudaStream_t stream) {
  const int64_t n = out_ch * out_len;
  if (n <= 0) return;
  const unsigned grid = blocks_for(n, kThreads);
  const int64_t ipg = in_ch / groups, opg = out_ch / groups;
  switch (kernel) {
    case 1:
      launch(conv1d_kernel<1>, grid, kThreads, 0, stream, x, len, w, bias, out_ch, ipg, opg, kernel,
             stride, dilation, y, out_len);
      break;
    case 3:
      launch(conv1d_kernel<3>, grid, kThreads, 0, stream, x, len, w, bias, out_ch, ipg, opg, kernel,
             stride, dilation, y, out_len);
      break;
    case 7:
      launch(conv1d_kernel<7>, grid, kThreads, 0, stream, x, len, w, bias, out_ch, ipg, opg, kernel,
             stride, dilation, y, out_len);
      break;
    default:
      launch(conv1d_kernel<0>, grid, kThreads, 0, stream, x, len, w, bias, out_ch, ipg, opg, kernel,
             stride, dilation, y, out_len);
  }
  check_launch("conv1d");
}

void launch_conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                             const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                             int64_t groups, float* y, cudaStream_t stream) {
  const int64_t out_len = (len - 1) * stride + kernel;
  const int64_t n = out_ch * out_len;
  if (len <= 0 || n <= 0) return;
  const unsigned grid = blocks_for(n, kThreads);
  const int64_t ipg = in_ch / groups, opg = out_ch / groups;
  if ((kernel + stride - 1) / stride <= 2)
    launch(conv_transpose1d_kernel<2>, grid, kThreads, 0, stream, x, len, w, bias, out_ch, ipg, opg,
           kernel, stride, y, out_len);
  else
    launch(conv_transpose1d_kernel<0>, grid, kThreads, 0, stream, x, len, w, bias, out_ch, ipg, opg,
           kernel, stride, y, out_len);
  check_launch("conv_transpose1d");
}

void launch_elu(const float* x, int64_t n, float alpha, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  launch(elu_kernel, blocks_for(n, kThreads), kThreads, 0, stream, x, n, alpha, y);
  check_launch("elu");
}

void launch_gelu(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  launch(gelu_kernel, blocks_for(n, kThreads), kThreads, 0, stream, x, n, y);
  check_launch("gelu");
}

void launch_layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim,
                       float eps, float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  launch(layer_norm_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, x, w, b, dim, eps, y);
  check_launch("layer_norm");
}

void launch_scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim, float* y,
                       cudaStream_t stream) {
  if (rows * dim <= 0) return;
  launch(scale_rows_kernel, blocks_for(rows * dim, kThreads), kThreads, 0, stream, x, scale, rows,
         dim, y);
  check_launch("scale_rows");
}

void launch_vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                      float* out, cudaStream_t stream) {
  if (n * dim <= 0) return;
  launch(vq_decode_kernel, blocks_for(n * dim, kThreads), kThreads, 0, stream, codebook, dim, codes,
         n, out);
  check_launch("vq_decode");
}

int64_t vq_encode_workspace_bytes(int64_t size, int64_t n) {
  return n * ((size + kThreads - 1) / kThreads) * 8;
}

void launch_vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x, int64_t n,
                      int32_t* codes, void* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t slices = (size + kThreads - 1) / kThreads;
  float* best_dist = static_cast<float*>(workspace);
  int32_t* best_index = reinterpret_cast<int32_t*>(best_dist + n * slices);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(slices));
  launch(vq_encode_slice_kernel, grid, kThreads, 0, stream, codebook, size, dim, x, best_dist,
         best_index);
  check_launch("vq_encode");
  launch(vq_encode_merge_kernel, blocks_for(n, kThreads), kThreads, 0, stream, best_dist,
         best_index, n, slices, codes);
  check_launch("vq_encode merge");
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
  launch_vq_encode(codebook, size, dim, x, n, codes,
                   scratch(static_cast<size_t>(vq_encode_workspace_bytes(size, n))), stream_);
}

}  // namespace drama::cuda

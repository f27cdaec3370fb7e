#include "backend/cuda/copy.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

namespace drama::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void copy_2d_kernel(float* __restrict__ dst, int64_t dst_stride,
                               const float* __restrict__ src, int64_t src_stride,
                               int64_t src_col_stride, int64_t rows, int64_t cols) {
  pdl_entry();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * cols) return;
  const int64_t r = e / cols, c = e % cols;
  dst[r * dst_stride + c] = src[r * src_stride + c * src_col_stride];
}

__global__ void fill_kernel(float* __restrict__ dst, int64_t stride, int64_t rows, int64_t cols,
                            float value) {
  pdl_entry();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * cols) return;
  dst[(e / cols) * stride + e % cols] = value;
}

__global__ void copy_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ src_row,
                                 float* __restrict__ dst, const int32_t* __restrict__ dst_row,
                                 int64_t n, int64_t dim) {
  pdl_entry();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * dim) return;
  const int64_t i = e / dim, d = e % dim;
  const int64_t s = src_row ? src_row[i] : i, t = dst_row ? dst_row[i] : i;
  dst[t * dim + d] = src[s * dim + d];
}

__global__ void gather_ids_kernel(const int32_t* __restrict__ src,
                                  const int32_t* __restrict__ index,
                                  const int32_t* __restrict__ offset, int64_t n,
                                  int32_t* __restrict__ dst) {
  pdl_entry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[index[i]] + offset[i];
}

}  // namespace

void launch_copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                    int64_t src_col_stride, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols <= 0) return;
  launch(copy_2d_kernel, blocks_for(rows * cols, kThreads), kThreads, 0, stream, dst, dst_stride,
         src, src_stride, src_col_stride, rows, cols);
  check_launch("copy_2d");
}

void launch_fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value,
                 cudaStream_t stream) {
  if (rows * cols <= 0) return;
  launch(fill_kernel, blocks_for(rows * cols, kThreads), kThreads, 0, stream, dst, stride, rows,
         cols, value);
  check_launch("fill");
}

void launch_copy_rows(const float* src, const int32_t* src_row, float* dst, const int32_t* dst_row,
                      int64_t n, int64_t dim, cudaStream_t stream) {
  if (n * dim <= 0) return;
  launch(copy_rows_kernel, blocks_for(n * dim, kThreads), kThreads, 0, stream, src, src_row, dst,
         dst_row, n, dim);
  check_launch("copy_rows");
}

void launch_gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset, int64_t n,
                       int32_t* dst, cudaStream_t stream) {
  if (n <= 0) return;
  launch(gather_ids_kernel, blocks_for(n, kThreads), kThreads, 0, stream, src, index, offset, n,
         dst);
  check_launch("gather_ids");
}

void CudaBackend::copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                          int64_t src_col_stride, int64_t rows, int64_t cols) {
  launch_copy_2d(dst, dst_stride, src, src_stride, src_col_stride, rows, cols, stream_);
}
void CudaBackend::fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) {
  launch_fill(dst, stride, rows, cols, value, stream_);
}
void CudaBackend::copy_rows(const float* src, const int32_t* src_row, float* dst,
                            const int32_t* dst_row, int64_t n, int64_t dim) {
  launch_copy_rows(src, src_row, dst, dst_row, n, dim, stream_);
}
void CudaBackend::gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset,
                             int64_t n, int32_t* dst) {
  launch_gather_ids(src, index, offset, n, dst, stream_);
}

}  // namespace drama::cuda

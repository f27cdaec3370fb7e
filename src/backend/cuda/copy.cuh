// Device copies, fills and id gathers (the sessions-and-lanes interface, issue 12): exact data
// movement, one thread per element, no staging through the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

// dst[r * dst_stride + c] = src[r * src_stride + c * src_col_stride].
void launch_copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                    int64_t src_col_stride, int64_t rows, int64_t cols, cudaStream_t stream);
// dst[r * stride + c] = value.
void launch_fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value,
                 cudaStream_t stream);
// dst[dst_row[i], :] = src[src_row[i], :] (a null index means i).
void launch_copy_rows(const float* src, const int32_t* src_row, float* dst, const int32_t* dst_row,
                      int64_t n, int64_t dim, cudaStream_t stream);
// dst[i] = src[index[i]] + offset[i].
void launch_gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset, int64_t n,
                       int32_t* dst, cudaStream_t stream);

}  // namespace drama::cuda

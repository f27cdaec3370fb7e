// Matrix products y[r, o] = sum_i x[r, i] w[o, i] (BF16 and NVFP4 W4A16) and NVFP4 dequantize
// (spec section 4). BF16 runs on tensor cores (linear.cu: mma with float32 accumulation, the
// activations split exactly into three bfloat16 terms, a fixed reduction split by the input size
// alone). NVFP4, and BF16 with DRAMA_CUDA_LINEAR=cores, run one warp per output column with the
// dot products of linear_dot.cuh: each lane sums a fixed strided subset of the reduction in
// increasing order and the warp adds the lanes' sums in one butterfly order, for every row. Rows
// are taken in tiles that reuse each weight load, and the tile never changes the order of any
// row's sum: a row's bits are the same alone or in any batch, on either kernel.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace drama::cuda {

void launch_linear(const LinearWeight& w, const float* x, int64_t rows, float* y,
                   cudaStream_t stream);
// y += the product (Backend::linear_add), bitwise launch_linear into a scratch then launch_add:
// the add folded into the product's store. Returns false (nothing launched) unless w is BF16 on
// tensor cores: the caller then makes the two launches.
bool launch_linear_add(const LinearWeight& w, const float* x, int64_t rows, float* y,
                       cudaStream_t stream);
// Products of one input (Backend::linears) in one launch of the tensor-core kernel, each with the
// bits of launch_linear alone. Returns false (nothing launched) unless there are 2 to 4 products,
// all BF16 on tensor cores with one input width: the caller then makes them one by one.
bool launch_linears(const Backend::Product* products, int64_t n, const float* x, int64_t rows,
                    cudaStream_t stream);
// Whether BF16 products run on tensor cores (DRAMA_CUDA_LINEAR unset or not "cores"), for every
// CUDA backend of the process; set_tensor_linear_flag returns the previous setting.
bool tensor_linear();
bool set_tensor_linear_flag(bool on);
// Whether the tensor-core products stage their weight tiles in shared memory where they fit
// (DRAMA_CUDA_LINEAR_STAGED unset or 1; the same bits as without); returns the previous setting.
bool set_linear_staged_flag(bool on);
// Whether staged products take the lean loop where it fits (DRAMA_CUDA_LINEAR_LEAN unset or 1;
// the same bits as the general loop); returns the previous setting.
bool set_linear_lean_flag(bool on);
// Whether lean products of one or two rows split their rows once per block (DRAMA_CUDA_LINEAR_SPLIT
// unset or 1; the same bits as each warp splitting its own); returns the previous setting.
bool set_linear_split_flag(bool on);
// From how many rows the tensor-core products take the wide layout (DRAMA_CUDA_LINEAR_WIDE_ROWS:
// unset, the default; N > 0, from N rows; 0, never; the same bits either way); returns the
// previous setting (-1: the default).
int64_t set_linear_wide_rows_flag(int64_t rows);
// Throws drama::Error when DRAMA_CUDA_LINEAR is set to neither "cores" nor "tensor".
void check_linear_environment();
void launch_dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out,
                       cudaStream_t stream);

}  // namespace drama::cuda

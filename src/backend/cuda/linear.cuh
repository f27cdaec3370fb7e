// Matrix products y[r, o] = sum_i x[r, i] w[o, i] (BF16 and NVFP4 W4A16) and NVFP4 dequantize
// (spec section 4). One warp per output column with the dot products of linear_dot.cuh: each
// lane sums a fixed strided subset of the reduction in increasing order and the warp adds the
// lanes' sums in one butterfly order, for every row. Rows are taken in tiles that reuse each
// weight load, and the tile never changes the order of any row's sum: a row's bits are the same
// alone or in any batch.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace drama::cuda {

void launch_linear(const LinearWeight& w, const float* x, int64_t rows, float* y,
                   cudaStream_t stream);
void launch_dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out,
                       cudaStream_t stream);

}  // namespace drama::cuda

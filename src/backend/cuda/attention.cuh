// Grouped-query attention over one sequence's KV cache (spec section 1). One block per (row,
// head), positions in chunks of the block size: each thread forms one score with the CPU
// backend's dot-product order (16 running lanes, a pairwise tree, the tail), the block takes the
// exact maximum, then per chunk the exponentials go to shared memory, one thread adds them to the
// running sum in increasing position and each thread adds its value dimensions in increasing
// position. No order depends on the row count or the block count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

void launch_attention(const float* q, int64_t rows, const int32_t* positions, const float* k_cache,
                      const float* v_cache, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      int64_t window, float* out, cudaStream_t stream);

}  // namespace drama::cuda

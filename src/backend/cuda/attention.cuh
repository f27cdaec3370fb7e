// Grouped-query attention over one sequence's KV cache (spec section 1), split-KV with a FIXED
// split: each (row, head) gets kSplits blocks, and block s takes the chunks s, s + kSplits, ... of
// 32 positions of the row's span, whatever the batch. In a chunk each warp forms the scores of 8
// positions (lane sums with fmaf, then warp_sum); the block keeps a running maximum, exp-sum
// (warp_sum of the chunk's exponentials) and value sums (increasing position). The last split of
// each (row, head) to finish merges the splits in increasing order (a counter per (row, head),
// set back to 0 by the merge). Every order depends on the row's position and window only, never
// on the row count or the rest of the batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

// Floats of the `partial` workspace launch_attention needs.
int64_t attention_partial_floats(int64_t rows, int64_t n_heads, int64_t head_dim);
// cache_row0: row r's cache starts at cache row cache_row0[r] (null: row 0 for every row).
void launch_attention(const float* q, int64_t rows, const int32_t* positions,
                      const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                      float* out, float* partial, unsigned* counters, cudaStream_t stream);

}  // namespace drama::cuda

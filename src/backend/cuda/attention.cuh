// Grouped-query attention over one sequence's KV cache (spec section 1), split-KV with a FIXED
// split: block s of a row takes the chunks s, s + kSplits, ... of 32 positions of the row's span,
// whatever the batch. Version 1 runs kSplits blocks per (row, query head): in a chunk each warp
// forms the scores of 8 positions (lane sums with fmaf, then warp_sum). Version 2 runs kSplits
// blocks per (row, KV head): the query heads of the KV head, a warp each, share the chunk's keys
// and values in shared memory, and lane j forms position j's score. Both keep a running maximum,
// exp-sum (warp_sum of the chunk's exponentials) and value sums (increasing position); the last
// split to finish merges the splits in increasing order (a counter per block group, set back to
// 0 by the merge). Every order depends on the row's position and window and the shapes only,
// never on the row count or the rest of the batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

// Version 2 (the default; attention.cu): one block per (row, KV head, split) whose query heads
// share each chunk's keys and values in shared memory, where version 1 reads them once per query
// head. DRAMA_CUDA_ATTENTION=v1 selects version 1 for every CUDA backend of the process;
// set_attention_version_flag switches it (the bench) and returns the previous version; shapes
// version 2 does not take (head_dim % 4 != 0) run version 1.
int attention_version();
int set_attention_version_flag(int version);
// Version 2's quad layout (the same bits: 128 threads a head, for launches of few blocks):
// -1 where its blocks take 2 heads (the default, DRAMA_CUDA_ATTENTION_QUAD unset), 0 never, 1
// always; returns the previous setting.
int set_attention_quad_flag(int quad);
// Throws drama::Error when DRAMA_CUDA_ATTENTION is set to neither "v1" nor "v2", or
// DRAMA_CUDA_ATTENTION_QUAD to neither "0" nor "1".
void check_attention_environment();

// Floats of the `partial` workspace launch_attention needs.
int64_t attention_partial_floats(int64_t rows, int64_t n_heads, int64_t head_dim);
// cache_row0: row r's cache starts at cache row cache_row0[r] (null: row 0 for every row).
void launch_attention(const float* q, int64_t rows, const int32_t* positions,
                      const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                      float* out, float* partial, unsigned* counters, cudaStream_t stream);

}  // namespace drama::cuda

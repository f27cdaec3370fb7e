// Batched sampling on the device (spec section 6; util/sampling.h is the reference): one block
// per row, the same steps as the host sampler, so the ids are the host sampler's: temperature
// (float32 divide), candidates in (score descending, id ascending) order (top-k by k rounds of a
// block-wide arg-max, or a bitonic sort when top-k keeps more than kSortRounds), then one thread
// walks the candidates with float64 exponentials, top-p and the counter-based uniform.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace drama::cuda {

// ids[i * stride] for i < n; a row holding NaN or Inf writes id 0 and sets flags[i * stride] =
// codebook + 1 unless already set. Sampled rows: vocabularies up to kMaxSampleVocab (beyond it
// only the non-finite check and greedy rows; a sampled row gets id 0).
constexpr int64_t kMaxSampleVocab = 4096;
int64_t sample_workspace_bytes(int64_t vocab, int64_t n);
void launch_sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                        int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride,
                        void* workspace, cudaStream_t stream);

}  // namespace drama::cuda

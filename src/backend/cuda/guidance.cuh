// Reference-conditioned guidance and the non-finite guard (spec section 6). Sampling itself reads
// the logits back and runs the host sampler (cuda_backend.cu), so its ids are the CPU's bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

void launch_guidance_combine(const float* cond, const float* uncond, int64_t n, float gamma,
                             float* out, cudaStream_t stream);
// Layout of drama::GuidanceRow (sessions-and-lanes interface): out row i = logits[cond_row] when
// uncond_row < 0, else logits[u] + gamma * (logits[c] - logits[u]).
struct GuidanceRowSpec {
  int32_t cond_row;
  int32_t uncond_row;
  float gamma;
};
void launch_guidance_rows(const float* logits, int64_t vocab, const GuidanceRowSpec* rows,
                          int64_t n, float* out, cudaStream_t stream);
// Sets *flag to 1 if any of n values is NaN or infinite (the caller zeroes it first). Writers
// only ever store 1, so the outcome does not depend on their order.
void launch_non_finite(const float* x, int64_t n, int32_t* flag, cudaStream_t stream);

}  // namespace drama::cuda

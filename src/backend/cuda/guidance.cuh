// Reference-conditioned guidance over a table of output rows (spec section 6), one thread per
// element: u + gamma * (c - u) as the CPU backend (no FMA contraction: the same bits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace drama::cuda {

// Out row i = logits[cond_row] when uncond_row < 0, else logits[u] + gamma * (logits[c] -
// logits[u]) (GuidanceRow, backend.h; `rows` in device memory).
void launch_guidance_rows(const float* logits, int64_t vocab, const GuidanceRow* rows, int64_t n,
                          float* out, cudaStream_t stream);
}  // namespace drama::cuda

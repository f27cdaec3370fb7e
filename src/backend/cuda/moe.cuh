// Mixture-of-experts routing and combination (spec sections 1 and 5). Routing runs one block per
// row: the block ranks the stored experts by original id, then one thread does the CPU backend's
// sequence (exp terms summed in increasing original id, top-k with ties to the lower original id,
// renormalisation). The combine is one thread per output element, experts in rank order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace drama::cuda {

void launch_route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                       const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                       int64_t k, bool norm_topk, int32_t* expert_index, float* weight,
                       cudaStream_t stream);
void launch_expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                           int64_t dim, float* y, cudaStream_t stream);

}  // namespace drama::cuda

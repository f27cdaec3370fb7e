// The CUDA backend's grouped expert kernels (moe.cuh) reachable from plain C++ (benches), with
// the signature Backend::moe_experts takes in the sessions-and-lanes interface (issue 12).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace drama::cuda {

struct ExpertTriple {
  LinearWeight gate, up, down;  // resident on the CUDA backend
};

// out[(r * out_slots + j), :] = down(silu(gate(x[r])) * up(x[r])) of stored expert
// expert_index[r * k + j], every chosen expert run once for all rows that chose it. Throws
// drama::Error when `backend` is not the CUDA backend. workspace: grouped_experts_floats().
void run_grouped_experts(Backend& backend, const ExpertTriple* experts, int64_t n_stored,
                         const float* x, int64_t rows, int64_t hidden, const int32_t* expert_index,
                         int64_t k, int64_t out_slots, float* out, float* workspace);
int64_t grouped_experts_floats(int64_t rows, int64_t k, int64_t inter, int64_t n_stored);

// Seconds per replay of run_grouped_experts captured once as a CUDA graph (no launch gaps: what
// the per-frame graph will see), median of `replays` timed with device events.
double time_grouped_experts_graph(Backend& backend, const ExpertTriple* experts, int64_t n_stored,
                                  const float* x, int64_t rows, int64_t hidden,
                                  const int32_t* expert_index, int64_t k, int64_t out_slots,
                                  float* out, float* workspace, int replays);

}  // namespace drama::cuda

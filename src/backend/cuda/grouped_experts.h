// The CUDA backend's grouped expert kernels (Backend::moe_experts) timed as one CUDA graph replay,
// for `drama bench decode --synthetic` (plain C++: callers include no CUDA header).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace drama::cuda {

// Seconds per replay of backend.moe_experts(...) captured once as a CUDA graph (no launch gaps:
// what the per-frame graph sees), median of `replays` timed with device events. Throws
// drama::Error when `backend` is not the CUDA backend.
double time_moe_experts_graph(Backend& backend, const ExpertWeights* experts, int64_t n_stored,
                              const float* x, int64_t rows, int64_t hidden,
                              const int32_t* expert_index, int64_t k, int64_t out_slots, float* out,
                              float* workspace, int replays);

// Selects the grouped expert kernels Backend::moe_experts runs on `backend` (1 or 2; moe.cuh: the
// same bits, a different layout) and returns the previous choice. The backend starts with
// DRAMA_CUDA_EXPERTS (v1 or v2; unset: 1). Throws drama::Error when `backend` is not the CUDA
// backend or the version is neither.
int set_moe_experts_version(Backend& backend, int version);

}  // namespace drama::cuda

// Elementwise activations shared by the kernels that apply them (the swiglu kernel and the fused
// expert loop of moe_experts), so that every caller computes the same bits.
#pragma once

#include <cmath>

namespace drama::cpu {

// silu(gate) * up.
inline float silu_times(float gate, float up) {
  return gate / (1.0f + std::exp(-gate)) * up;
}

}  // namespace drama::cpu

// Reference-conditioned guidance, sampling and the non-finite check (spec section 6).
#include <cmath>
#include <span>

#include "backend/cpu/cpu_backend.h"
#include "util/sampling.h"

namespace drama::cpu {

void CpuBackend::guidance_combine(const float* cond, const float* uncond, int64_t n, float gamma,
                                  float* out) {
  elementwise(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = uncond[i] + gamma * (cond[i] - uncond[i]);
  });
}

int32_t CpuBackend::sample(const float* logits, int64_t vocab, const SamplingParams& params,
                           uint64_t seed, uint64_t frame, uint64_t codebook) {
  const double u = counter_uniform(seed, frame, codebook);
  return sample_logits(std::span<const float>(logits, static_cast<size_t>(vocab)),
                       params.temperature, params.top_k, params.top_p, u);
}

bool CpuBackend::has_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

}  // namespace drama::cpu

// Reference-conditioned guidance, sampling and the non-finite check (spec section 6).
#include <algorithm>
#include <cmath>
#include <span>

#include "backend/cpu/cpu_backend.h"
#include "util/sampling.h"

namespace drama::cpu {

void CpuBackend::guidance_combine(const float* logits, int64_t vocab, const GuidanceRow* rows,
                                  int64_t n, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* cond = logits + static_cast<int64_t>(rows[r].cond_row) * vocab;
    float* o = out + r * vocab;
    if (rows[r].uncond_row < 0) {
      std::copy(cond, cond + vocab, o);
      continue;
    }
    const float* uncond = logits + static_cast<int64_t>(rows[r].uncond_row) * vocab;
    const float gamma = rows[r].gamma;
    elementwise(vocab, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) o[i] = uncond[i] + gamma * (cond[i] - uncond[i]);
    });
  }
}

void CpuBackend::sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                             int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride) {
  pool_.parallel_for(n, 1, static_cast<double>(vocab) * 64, [&](int64_t r0, int64_t r1) {
    SampleScratch& ss = thread_scratch(0, 0, static_cast<size_t>(vocab)).sample;
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits + r * vocab;
      bool finite = true;
      for (int64_t i = 0; i < vocab && finite; ++i) finite = std::isfinite(l[i]);
      if (!finite) {
        ids[r * stride] = 0;
        if (flags[r * stride] == 0) flags[r * stride] = static_cast<int32_t>(codebook + 1);
        continue;
      }
      const SampleRow& p = rows[r];
      const double u = counter_uniform(p.seed, p.frame, static_cast<uint64_t>(codebook));
      ids[r * stride] = sample_logits(std::span<const float>(l, static_cast<size_t>(vocab)),
                                      p.temperature, p.top_k, p.top_p, u, ss);
    }
  });
}

}  // namespace drama::cpu

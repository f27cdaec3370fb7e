// Per-codebook sampling (spec section 6) with the non-finite guard: logits holding NaN or Inf
// (a corrupted weight) stop generation with an error naming the frame, never become audio.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace drama {

class FrameSampler {
 public:
  FrameSampler(const SamplingParams& params, uint64_t seed) : params_(params), seed_(seed) {}
  int32_t draw(Backend& backend, const float* logits, int64_t vocab, int64_t frame,
               int64_t codebook) const;

 private:
  SamplingParams params_;
  uint64_t seed_;
};

}  // namespace drama

#include "model/guidance.h"

namespace drama {

GuidancePair::GuidancePair(bool has_voice, float gamma, CfgMode mode)
    : guided_(has_voice && gamma != 1.0f), gamma_(gamma) {
  if (!guided_)
    groups_ = {{0}};
  else if (mode == CfgMode::Paired)
    groups_ = {{0, 1}};
  else
    groups_ = {{0}, {1}};
}

const float* GuidancePair::combine(Backend& backend, const float* logits, int64_t n,
                                   float* out) const {
  if (!guided_) return logits;
  backend.guidance_combine(logits, logits + n, n, gamma_, out);
  return out;
}

}  // namespace drama

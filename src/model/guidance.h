// Reference-conditioned guidance (spec section 6): which branches a session runs and how they
// are batched (paired = both branches in the same pass; separate = the unconditional branch in a
// pass of its own); logits = l_uncond + gamma * (l_cond - l_uncond) in FP32 (Backend's
// guidance_combine over GuidanceRow tables).
#pragma once

#include <cstdint>

namespace drama {

enum class CfgMode { Paired, Separate };

class GuidancePair {
 public:
  // Branch 0 is the conditional one (or the only one without a voice); branch 1, when guided,
  // the unconditional one. gamma == 1 or no voice: one branch, the other never runs.
  GuidancePair(bool has_voice, float gamma, CfgMode mode)
      : guided_(has_voice && gamma != 1.0f), separate_(mode == CfgMode::Separate) {}
  int64_t branches() const { return guided_ ? 2 : 1; }
  bool guided() const { return guided_; }
  // The pass a branch's rows run in: 0, or 1 for the unconditional branch under separate CFG.
  int pass(int64_t branch) const { return guided_ && separate_ && branch == 1 ? 1 : 0; }

 private:
  bool guided_, separate_;
};

}  // namespace drama

// Reference-conditioned guidance (spec section 6): which branches run, how they are grouped into
// batches (paired = both branches as one batch of 2 rows; separate = one after the other), and
// logits = l_uncond + gamma * (l_cond - l_uncond) in FP32.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace drama {

enum class CfgMode { Paired, Separate };

class GuidancePair {
 public:
  // Branch 0 is the conditional one (or the only one without a voice); branch 1, when guided,
  // the unconditional one. gamma == 1 or no voice: one branch, the other never runs.
  GuidancePair(bool has_voice, float gamma, CfgMode mode);
  int64_t branches() const { return guided_ ? 2 : 1; }
  bool guided() const { return guided_; }
  // Groups of branch indices that run as one batch, in order.
  const std::vector<std::vector<int64_t>>& groups() const { return groups_; }
  // logits [branches, n] -> the guided logits [n]; with one branch returns logits itself.
  const float* combine(Backend& backend, const float* logits, int64_t n, float* out) const;

 private:
  bool guided_;
  float gamma_;
  std::vector<std::vector<int64_t>> groups_;
};

}  // namespace drama

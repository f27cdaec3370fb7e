// Mixture-of-experts MLP (spec sections 1 and 5): FP32 router over ORIGINAL expert ids, top-k
// with ties to the lower id, experts run per stored expert on the rows that chose it, combined
// per row in rank order (so a row's result never depends on the other rows of the batch).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "model/exec.h"

namespace drama {

class MoeBlock {
 public:
  // `weights` must already be resident on `backend`.
  MoeBlock(Backend& backend, const MoeWeights& weights, const MoeConfig& config);

  // out [rows, H] = MoE(xn [rows, H]).
  void forward(Exec& exec, const float* xn, int64_t rows, int64_t hidden, float* out);

  // TEST-ONLY (pruning contract): router logits of these ORIGINAL expert ids are set to -inf
  // before routing. Ids not stored in this layer are ignored.
  void set_masked_experts(const std::vector<int32_t>& original_ids);

  // Stored expert indices chosen by the last forward, [rows, k] (for traffic accounting).
  const std::vector<int32_t>& last_choice() const { return choice_; }
  const MoeWeights& weights() const { return w_; }

 private:
  MoeWeights w_;
  int64_t k_;
  bool norm_topk_;
  std::unique_ptr<DeviceBuffer> logit_column_, original_id_;
  std::vector<int32_t> masked_columns_;
  std::vector<int32_t> choice_;
};

}  // namespace drama

// Mixture-of-experts MLP (spec sections 1 and 5): FP32 router over ORIGINAL expert ids, top-k
// with ties to the lower id, the chosen experts run as device work (Backend::moe_experts: rows
// grouped by expert on the device, each expert's weights read once for all rows that chose it),
// combined per row in rank order (so a row's result never depends on the other rows of the
// batch). Nothing here reads the expert choice on the host.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "model/workspace.h"

namespace drama {

class MoeBlock {
 public:
  // `weights` must already be resident on `backend`.
  MoeBlock(Backend& backend, const MoeWeights& weights, const MoeConfig& config);

  // residual [rows, H] += MoE(xn [rows, H]) (Backend::expert_sum_add; out [rows, H] its scratch).
  // With `next_norm`, also next_xn = rms_norm(residual, next_norm, eps) after the add (the next
  // layer's input norm, Backend::expert_sum_add_norm); next_xn may be xn (read before it).
  void forward(Workspace& ws, const float* xn, int64_t rows, int64_t hidden, float* out,
               float* residual, const uint16_t* next_norm = nullptr, float eps = 0.0f,
               float* next_xn = nullptr);
  // Reserves the workspace for calls of up to `rows` rows.
  void reserve(Workspace& ws, int64_t rows, int64_t hidden) const;

  // TEST-ONLY (pruning contract): router logits of these ORIGINAL expert ids are set to -inf
  // before routing. Ids not stored in this layer are ignored.
  void set_masked_experts(const std::vector<int32_t>& original_ids);
  const MoeWeights& weights() const { return w_; }

 private:
  int64_t slots() const { return k_ + (w_.shared_expert ? 1 : 0); }

  MoeWeights w_;
  std::vector<ExpertWeights> experts_;
  int64_t k_;
  bool norm_topk_;
  std::unique_ptr<DeviceBuffer> logit_column_, original_id_;
  std::vector<int32_t> masked_columns_;
};

}  // namespace drama

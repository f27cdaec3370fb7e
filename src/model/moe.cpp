#include "model/moe.h"

#include <algorithm>
#include <limits>

#include "model/transformer.h"
#include "util/error.h"

namespace drama {

namespace {
std::unique_ptr<DeviceBuffer> upload_table(Backend& be, const std::vector<int32_t>& v) {
  auto buf = be.alloc(std::max<size_t>(v.size(), 1) * sizeof(int32_t));
  if (!v.empty()) be.upload(buf->data(), v.data(), v.size() * sizeof(int32_t));
  return buf;
}
}  // namespace

MoeBlock::MoeBlock(Backend& backend, const MoeWeights& weights, const MoeConfig& config)
    : w_(weights),
      // A layer storing fewer experts than experts_per_token routes to all of them.
      k_(std::min<int64_t>(config.experts_per_token, static_cast<int64_t>(weights.experts.size()))),
      norm_topk_(config.norm_topk_prob) {
  if (w_.experts.empty()) throw Error("a MoE layer stores no experts");
  for (const MlpWeights& e : w_.experts) experts_.push_back({e.gate, e.up, e.down});
  backend.prepare_experts(experts_.data(), static_cast<int64_t>(experts_.size()));
  logit_column_ = upload_table(backend, w_.logit_column);
  original_id_ = upload_table(backend, w_.original_id);
}

void MoeBlock::set_masked_experts(const std::vector<int32_t>& original_ids) {
  masked_columns_.clear();
  for (int32_t id : original_ids)
    for (size_t s = 0; s < w_.original_id.size(); ++s)
      if (w_.original_id[s] == id) masked_columns_.push_back(w_.logit_column[s]);
}

void MoeBlock::reserve(Workspace& ws, int64_t rows, int64_t hidden) const {
  const size_t r = static_cast<size_t>(std::max<int64_t>(rows, 1)), f = sizeof(float);
  const size_t H = static_cast<size_t>(hidden), S = static_cast<size_t>(slots());
  ws.reserve(Buf::kRouterLogits, r * static_cast<size_t>(w_.router.out) * f);
  ws.reserve(Buf::kExpertIndex, r * static_cast<size_t>(k_) * f);
  ws.reserve(Buf::kExpertWeight, r * static_cast<size_t>(k_) * f);
  ws.reserve(Buf::kExpertOut, r * S * H * f);
  const int64_t n_stored = static_cast<int64_t>(experts_.size());
  ws.reserve(Buf::kMoeWorkspace,
             static_cast<size_t>(Backend::moe_workspace_floats(
                 static_cast<int64_t>(r), k_, hidden, experts_.front().gate.out, n_stored)) *
                 f);
  if (w_.shared_expert) {
    const size_t inter = static_cast<size_t>(w_.shared_expert->gate.out);
    for (Buf b : {Buf::kGate, Buf::kUp, Buf::kAct}) ws.reserve(b, r * inter * f);
    ws.reserve(Buf::kSharedOut, r * H * f);
    ws.reserve(Buf::kSharedGate, r * f);
    ws.reserve(Buf::kCombineWeight, r * S * f);
  }
}

void MoeBlock::forward(Workspace& ws, const float* xn, int64_t rows, int64_t hidden, float* out,
                       float* residual, const uint16_t* next_norm, float eps, float* next_xn) {
  Backend& be = ws.backend();
  const int64_t H = hidden, R = w_.router.out, k = k_, S = slots();
  const int64_t n_stored = static_cast<int64_t>(experts_.size());
  float* logits = ws.f32(Buf::kRouterLogits, rows * R);
  ws.linear(w_.router, xn, rows, logits);
  for (int32_t c : masked_columns_)
    be.fill(logits + c, R, rows, 1, -std::numeric_limits<float>::infinity());
  int32_t* index = ws.i32(Buf::kExpertIndex, rows * k);
  float* weight = ws.f32(Buf::kExpertWeight, rows * k);
  be.route_topk(logits, rows, R, static_cast<const int32_t*>(logit_column_->data()),
                static_cast<const int32_t*>(original_id_->data()), n_stored, k, norm_topk_, index,
                weight);
  float* expert_out = ws.f32(Buf::kExpertOut, rows * S * H);
  float* workspace =
      ws.f32(Buf::kMoeWorkspace,
             Backend::moe_workspace_floats(rows, k, H, experts_.front().gate.out, n_stored));
  be.moe_experts(experts_.data(), n_stored, xn, rows, H, index, k, S, expert_out, workspace);
  const float* combine_weight = weight;
  if (w_.shared_expert) {
    // The shared expert is one more slot after the routed ones, weighted by sigmoid(gate).
    float* sh = ws.f32(Buf::kSharedOut, rows * H);
    swiglu_mlp(ws, *w_.shared_expert, xn, rows, sh, Buf::kGate, Buf::kUp, Buf::kAct);
    be.copy_2d(expert_out + k * H, S * H, sh, H, 1, rows, H);
    float* g = ws.f32(Buf::kSharedGate, rows);
    ws.linear(w_.shared_expert_gate, xn, rows, g);
    be.sigmoid(g, rows, g);
    float* cw = ws.f32(Buf::kCombineWeight, rows * S);
    be.copy_2d(cw, S, weight, k, 1, rows, k);
    be.copy_2d(cw + k, S, g, 1, 1, rows, 1);
    combine_weight = cw;
  }
  if (next_norm)
    be.expert_sum_add_norm(expert_out, combine_weight, rows, S, H, out, residual, next_norm, eps,
                           next_xn);
  else
    be.expert_sum_add(expert_out, combine_weight, rows, S, H, out, residual);
}

}  // namespace drama

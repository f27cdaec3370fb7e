#include "model/moe.h"

#include <algorithm>
#include <cmath>
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
  logit_column_ = upload_table(backend, w_.logit_column);
  original_id_ = upload_table(backend, w_.original_id);
}

void MoeBlock::set_masked_experts(const std::vector<int32_t>& original_ids) {
  masked_columns_.clear();
  for (int32_t id : original_ids)
    for (size_t s = 0; s < w_.original_id.size(); ++s)
      if (w_.original_id[s] == id) masked_columns_.push_back(w_.logit_column[s]);
}

void MoeBlock::forward(Exec& exec, const float* xn, int64_t rows, int64_t hidden, float* out) {
  Backend& be = exec.backend();
  const int64_t H = hidden, R = w_.router.out, k = k_;
  const int64_t n_stored = static_cast<int64_t>(w_.experts.size());
  float* logits = exec.f32(Slot::kRouterLogits, rows * R);
  exec.linear(w_.router, xn, rows, logits);
  if (!masked_columns_.empty()) {
    std::vector<float> host(rows * R);
    be.download(host.data(), logits, host.size() * sizeof(float));
    for (int64_t r = 0; r < rows; ++r)
      for (int32_t c : masked_columns_) host[r * R + c] = -std::numeric_limits<float>::infinity();
    be.upload(logits, host.data(), host.size() * sizeof(float));
  }
  int32_t* index = exec.i32(Slot::kExpertIndex, rows * k);
  float* weight = exec.f32(Slot::kExpertWeight, rows * k);
  be.route_topk(logits, rows, R, static_cast<const int32_t*>(logit_column_->data()),
                static_cast<const int32_t*>(original_id_->data()), n_stored, k, norm_topk_, index,
                weight);
  choice_.resize(rows * k);
  be.download(choice_.data(), index, choice_.size() * sizeof(int32_t));

  const bool shared = w_.shared_expert.has_value();
  const int64_t slots = k + (shared ? 1 : 0);
  float* expert_out = exec.f32(Slot::kExpertOut, rows * slots * H);
  // Group (row, rank) pairs by stored expert; each expert runs once on its gathered rows.
  std::vector<std::vector<int64_t>> by_expert(n_stored);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t s = choice_[r * k + j];
      if (s < 0 || s >= n_stored) throw Error("MoE routing returned an invalid expert index");
      by_expert[s].push_back(r * k + j);
    }
  for (int64_t s = 0; s < n_stored; ++s) {
    const auto& pairs = by_expert[s];
    if (pairs.empty()) continue;
    const int64_t n = static_cast<int64_t>(pairs.size());
    float* gin = exec.f32(Slot::kGatherIn, n * H);
    float* gout = exec.f32(Slot::kGatherOut, n * H);
    for (int64_t i = 0; i < n; ++i) exec.copy_rows(xn + (pairs[i] / k) * H, 1, H, gin + i * H);
    swiglu_mlp(exec, w_.experts[s], gin, n, gout, Slot::kGatherGate, Slot::kGatherUp,
               Slot::kGatherAct);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = pairs[i] / k, j = pairs[i] % k;
      exec.copy_rows(gout + i * H, 1, H, expert_out + (r * slots + j) * H);
    }
  }
  const float* combine_weight = weight;
  if (shared) {
    // The shared expert is one more slot after the routed ones, weighted by sigmoid(gate).
    float* sh = exec.f32(Slot::kGatherOut, rows * H);
    swiglu_mlp(exec, *w_.shared_expert, xn, rows, sh, Slot::kGatherGate, Slot::kGatherUp,
               Slot::kGatherAct);
    for (int64_t r = 0; r < rows; ++r)
      exec.copy_rows(sh + r * H, 1, H, expert_out + (r * slots + k) * H);
    float* g = exec.f32(Slot::kSharedGate, rows);
    exec.linear(w_.shared_expert_gate, xn, rows, g);
    std::vector<float> hg(rows), hw(rows * k), cw(rows * slots);
    be.download(hg.data(), g, rows * sizeof(float));
    be.download(hw.data(), weight, hw.size() * sizeof(float));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < k; ++j) cw[r * slots + j] = hw[r * k + j];
      cw[r * slots + k] = 1.0f / (1.0f + std::exp(-hg[r]));
    }
    float* dev = exec.f32(Slot::kCombineWeight, cw.size());
    be.upload(dev, cw.data(), cw.size() * sizeof(float));
    combine_weight = dev;
  }
  exec.zero(out, rows * H);
  be.expert_combine(expert_out, combine_weight, rows, slots, H, out);
}

}  // namespace drama

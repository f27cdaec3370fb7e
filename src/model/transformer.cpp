#include "model/transformer.h"

#include "model/moe.h"

#include <vector>

namespace drama {

TransformerShape transformer_shape(const TransformerConfig& c) {
  TransformerShape s;
  s.hidden = c.hidden_size;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.eps = static_cast<float>(c.rms_norm_eps);
  s.theta = static_cast<float>(c.rope_theta);
  return s;
}

int32_t* upload_positions(Exec& exec, std::span<const Segment> segments) {
  std::vector<int32_t> pos;
  for (const Segment& seg : segments)
    for (int64_t i = 0; i < seg.rows; ++i) pos.push_back(static_cast<int32_t>(seg.position0 + i));
  return exec.upload_i32(Slot::kPositions, pos);
}

void attention_sublayer(Exec& exec, const TransformerShape& s, const LayerWeights& w, int64_t layer,
                        float* x, int64_t rows, const int32_t* positions,
                        std::span<const Segment> segments) {
  Backend& be = exec.backend();
  const int64_t H = s.hidden, qd = s.q_dim(), kvd = s.kv_dim();
  float* xn = exec.f32(Slot::kNormed, rows * H);
  float* q = exec.f32(Slot::kQ, rows * qd);
  float* k = exec.f32(Slot::kK, rows * kvd);
  float* v = exec.f32(Slot::kV, rows * kvd);
  float* att = exec.f32(Slot::kAttnOut, rows * qd);
  float* proj = exec.f32(Slot::kProj, rows * H);

  be.rms_norm(x, w.input_norm, rows, H, s.eps, xn);
  exec.linear(w.attn.q, xn, rows, q);
  exec.linear(w.attn.k, xn, rows, k);
  exec.linear(w.attn.v, xn, rows, v);
  // QK-norm is an RMS norm over each head's head_dim values.
  be.rms_norm(q, w.attn.q_norm, rows * s.heads, s.head_dim, s.eps, q);
  be.rms_norm(k, w.attn.k_norm, rows * s.kv_heads, s.head_dim, s.eps, k);
  be.rope(q, rows, s.heads, s.head_dim, positions, s.theta);
  be.rope(k, rows, s.kv_heads, s.head_dim, positions, s.theta);
  for (const Segment& seg : segments) {
    KvCache& c = *seg.cache;
    exec.copy_rows(k + seg.row0 * kvd, seg.rows, kvd, c.k(layer) + seg.position0 * kvd);
    exec.copy_rows(v + seg.row0 * kvd, seg.rows, kvd, c.v(layer) + seg.position0 * kvd);
    be.attention(q + seg.row0 * qd, seg.rows, positions + seg.row0, c.k(layer), c.v(layer), s.heads,
                 s.kv_heads, s.head_dim, 0, att + seg.row0 * qd);
  }
  exec.linear(w.attn.o, att, rows, proj);
  be.add(proj, rows * H, x);
}

void swiglu_mlp(Exec& exec, const MlpWeights& w, const float* xn, int64_t rows, float* out,
                Slot gate_slot, Slot up_slot, Slot act_slot) {
  const int64_t inter = w.gate.out;
  float* g = exec.f32(gate_slot, rows * inter);
  float* u = exec.f32(up_slot, rows * inter);
  float* a = exec.f32(act_slot, rows * inter);
  exec.linear(w.gate, xn, rows, g);
  exec.linear(w.up, xn, rows, u);
  exec.backend().swiglu(g, u, rows * inter, a);
  exec.linear(w.down, a, rows, out);
}

}  // namespace drama

namespace drama {

LayerStack::LayerStack(Backend& backend, const TransformerShape& shape,
                       std::vector<LayerWeights> layers, const MoeConfig* moe)
    : shape_(shape), layers_(std::move(layers)) {
  for (const LayerWeights& l : layers_)
    moe_.push_back(l.dense || !moe ? nullptr : std::make_unique<MoeBlock>(backend, l.moe, *moe));
}

LayerStack::~LayerStack() = default;

void LayerStack::forward(Exec& exec, float* x, int64_t rows, std::span<const Segment> segments) {
  Backend& be = exec.backend();
  const int64_t H = shape_.hidden;
  const int32_t* positions = upload_positions(exec, segments);
  for (int64_t l = 0; l < num_layers(); ++l) {
    const LayerWeights& w = layers_[l];
    attention_sublayer(exec, shape_, w, l, x, rows, positions, segments);
    float* xn = exec.f32(Slot::kNormed, rows * H);
    float* out = exec.f32(Slot::kMlpOut, rows * H);
    be.rms_norm(x, w.post_attn_norm, rows, H, shape_.eps, xn);
    if (moe_[l])
      moe_[l]->forward(exec, xn, rows, H, out);
    else
      swiglu_mlp(exec, w.mlp, xn, rows, out, Slot::kGate, Slot::kUp, Slot::kAct);
    be.add(out, rows * H, x);
  }
}

}  // namespace drama

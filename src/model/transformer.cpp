#include "model/transformer.h"

#include <algorithm>
#include <string>

#include "model/moe.h"
#include "util/error.h"

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

void HostRowTables::add(const KvPool& pool, int64_t slot, int64_t position) {
  // A position at or past the capacity would write another slot's cache (and reach the context
  // attention_sublayer passes as the window).
  if (position < 0 || position >= pool.capacity())
    throw Error("internal: position " + std::to_string(position) + " outside a KV cache of " +
                std::to_string(pool.capacity()) + " positions");
  positions.push_back(static_cast<int32_t>(position));
  cache_row0.push_back(static_cast<int32_t>(pool.row0(slot)));
  kv_row.push_back(static_cast<int32_t>(pool.row0(slot) + position));
}

RowTables HostRowTables::upload(Workspace& ws) const {
  std::vector<int32_t> all(positions);
  all.insert(all.end(), cache_row0.begin(), cache_row0.end());
  all.insert(all.end(), kv_row.begin(), kv_row.end());
  const int32_t* p = ws.upload_i32(Buf::kPositions, all);
  const size_t n = positions.size();
  return {p, p + n, p + 2 * n};
}

void attention_sublayer(Workspace& ws, const TransformerShape& s, const LayerWeights& w,
                        int64_t layer, float* x, int64_t rows, const RowTables& t, KvPool& cache,
                        bool normed) {
  Backend& be = ws.backend();
  const int64_t H = s.hidden, qd = s.q_dim(), kvd = s.kv_dim();
  float* xn = ws.f32(Buf::kNormed, rows * H);
  float* q = ws.f32(Buf::kQ, rows * qd);
  float* k = ws.f32(Buf::kK, rows * kvd);
  float* v = ws.f32(Buf::kV, rows * kvd);
  float* att = ws.f32(Buf::kAttnOut, rows * qd);
  float* proj = ws.f32(Buf::kProj, rows * H);

  if (!normed) be.rms_norm(x, w.input_norm, rows, H, s.eps, xn);
  ws.linears({{&w.attn.q, q}, {&w.attn.k, k}, {&w.attn.v, v}}, xn, rows);
  // QK-norm (an RMS norm over each head's head_dim values), rotary, and k and v into the cache.
  be.qk_norm_rope_cache(q, k, v, rows, s.heads, s.kv_heads, s.head_dim, w.attn.q_norm,
                        w.attn.k_norm, s.eps, t.positions, s.theta, t.kv_row, cache.k(layer),
                        cache.v(layer));
  // The window is the cache's context: every position is below it (kv_pool.h), so it cuts
  // nothing (the same positions, the same bits as no window), and it bounds a row's span, which
  // a backend may use to size its launch (CUDA: the splits a span can use).
  be.attention(q, rows, t.positions, t.cache_row0, cache.k(layer), cache.v(layer), s.heads,
               s.kv_heads, s.head_dim, cache.context(), att);
  ws.linear_add(w.attn.o, att, rows, proj, x);
}

void swiglu_mlp(Workspace& ws, const MlpWeights& w, const float* xn, int64_t rows, float* out,
                Buf gate_buf, Buf up_buf, Buf act_buf, float* residual) {
  const int64_t inter = w.gate.out;
  float* g = ws.f32(gate_buf, rows * inter);
  float* u = ws.f32(up_buf, rows * inter);
  float* a = ws.f32(act_buf, rows * inter);
  ws.linears({{&w.gate, g}, {&w.up, u}}, xn, rows);
  ws.backend().swiglu(g, u, rows * inter, a);
  if (residual)
    ws.linear_add(w.down, a, rows, out, residual);
  else
    ws.linear(w.down, a, rows, out);
}

LayerStack::LayerStack(Backend& backend, const TransformerShape& shape,
                       std::vector<LayerWeights> layers, const MoeConfig* moe)
    : shape_(shape), layers_(std::move(layers)) {
  for (const LayerWeights& l : layers_)
    moe_.push_back(l.dense || !moe ? nullptr : std::make_unique<MoeBlock>(backend, l.moe, *moe));
}

LayerStack::~LayerStack() = default;

void LayerStack::forward(Workspace& ws, float* x, int64_t rows, const RowTables& t, KvPool& cache) {
  if (rows <= 0) return;
  Backend& be = ws.backend();
  const int64_t H = shape_.hidden;
  bool normed = false;  // Buf::kNormed holds the next layer's input norm of x
  for (int64_t l = 0; l < num_layers(); ++l) {
    const LayerWeights& w = layers_[l];
    attention_sublayer(ws, shape_, w, l, x, rows, t, cache, normed);
    float* xn = ws.f32(Buf::kNormed, rows * H);
    float* out = ws.f32(Buf::kMlpOut, rows * H);
    be.rms_norm(x, w.post_attn_norm, rows, H, shape_.eps, xn);
    // A MoE block's residual add also writes the next layer's input norm (one launch on a GPU).
    const uint16_t* next_norm = l + 1 < num_layers() ? layers_[l + 1].input_norm : nullptr;
    if (moe_[l]) {
      moe_[l]->forward(ws, xn, rows, H, out, x, next_norm, shape_.eps, xn);
      normed = next_norm != nullptr;
    } else {
      swiglu_mlp(ws, w.mlp, xn, rows, out, Buf::kGate, Buf::kUp, Buf::kAct, x);
      normed = false;
    }
  }
}

void LayerStack::reserve(Workspace& ws, int64_t rows) const {
  const size_t r = static_cast<size_t>(std::max<int64_t>(rows, 1)), f = sizeof(float);
  const size_t H = shape_.hidden, qd = shape_.q_dim(), kvd = shape_.kv_dim();
  ws.reserve(Buf::kNormed, r * H * f);
  ws.reserve(Buf::kQ, r * qd * f);
  ws.reserve(Buf::kK, r * kvd * f);
  ws.reserve(Buf::kV, r * kvd * f);
  ws.reserve(Buf::kAttnOut, r * qd * f);
  ws.reserve(Buf::kProj, r * H * f);
  ws.reserve(Buf::kMlpOut, r * H * f);
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (moe_[l]) {
      moe_[l]->reserve(ws, rows, shape_.hidden);
    } else {
      const size_t inter = layers_[l].mlp.gate.out;
      for (Buf b : {Buf::kGate, Buf::kUp, Buf::kAct}) ws.reserve(b, r * inter * f);
    }
  }
}

}  // namespace drama

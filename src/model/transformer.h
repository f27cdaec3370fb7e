// Pieces shared by the backbone and the tower (spec section 1): pre-norm GQA attention with
// per-head RMS QK-norm and rotate-half RoPE over per-sequence KV caches, and the SwiGLU MLP.
//
// A call processes `rows` activation rows made of segments: each segment is consecutive positions
// of ONE sequence (a guidance branch) with its own KV cache. Linears run over all rows at once
// (each weight read once for the whole batch); attention runs per segment on its own cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "model/exec.h"
#include "model/kv_cache.h"

namespace drama {

struct TransformerShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  float theta = 10000.0f;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

TransformerShape transformer_shape(const TransformerConfig& c);

struct Segment {
  KvCache* cache = nullptr;
  int64_t row0 = 0;  // first row of the segment in the batch
  int64_t rows = 0;
  int64_t position0 = 0;  // position of its first row; rows hold position0, position0 + 1, ...
};

// Uploads the positions of every row of `segments` (rows in segment order) and returns them.
int32_t* upload_positions(Exec& exec, std::span<const Segment> segments);

// x += o_proj(attention(qk_norm_rope(q/k/v_proj(rms_norm(x))))) for layer `layer`; writes the
// new keys and values of every segment into its cache at its positions.
void attention_sublayer(Exec& exec, const TransformerShape& s, const LayerWeights& w, int64_t layer,
                        float* x, int64_t rows, const int32_t* positions,
                        std::span<const Segment> segments);

// out = down(silu(gate(xn)) * up(xn)) over rows.
void swiglu_mlp(Exec& exec, const MlpWeights& w, const float* xn, int64_t rows, float* out,
                Slot gate_slot, Slot up_slot, Slot act_slot);

}  // namespace drama

namespace drama {

class MoeBlock;

// A stack of pre-norm layers: attention then a dense SwiGLU MLP or a MoE block.
class LayerStack {
 public:
  // `layers` must already be resident; MoE layers get a MoeBlock built here.
  LayerStack(Backend& backend, const TransformerShape& shape, std::vector<LayerWeights> layers,
             const MoeConfig* moe);
  ~LayerStack();
  // x [rows, hidden] in place through every layer.
  void forward(Exec& exec, float* x, int64_t rows, std::span<const Segment> segments);
  const TransformerShape& shape() const { return shape_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  MoeBlock* moe(int64_t layer) { return moe_[layer].get(); }

 private:
  TransformerShape shape_;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<MoeBlock>> moe_;
};

}  // namespace drama

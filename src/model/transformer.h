// Pieces shared by the backbone and the tower (spec section 1): pre-norm GQA attention with
// per-head RMS QK-norm and rotate-half RoPE over pooled KV caches, the SwiGLU MLP, and the layer
// stack built from them.
//
// A call processes `rows` activation rows of any mix of sequences: each row carries its position
// and its sequence's cache (RowTables, device memory). Linears run over all rows at once (each
// weight read once for the whole batch); attention runs once per layer over every row, each row
// attending only to its own sequence's cache.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "model/kv_pool.h"
#include "model/workspace.h"

namespace drama {

class MoeBlock;

struct TransformerShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  float theta = 10000.0f;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

TransformerShape transformer_shape(const TransformerConfig& c);

// Per-row tables (device pointers, each [rows]): the row's position, the first cache row of its
// sequence (KvPool::row0) and the cache row its key and value are written to (row0 + position).
struct RowTables {
  const int32_t* positions = nullptr;
  const int32_t* cache_row0 = nullptr;
  const int32_t* kv_row = nullptr;
};

// Host-side builder of RowTables for one sequence in `slot` at positions position0.. (tests,
// teacher forcing); upload() puts them into the workspace.
struct HostRowTables {
  std::vector<int32_t> positions, cache_row0, kv_row;
  void add(const KvPool& pool, int64_t slot, int64_t position);
  RowTables upload(Workspace& ws) const;
};

// x += o_proj(attention(qk_norm_rope(q/k/v_proj(rms_norm(x))))) for layer `layer`; writes every
// row's key and value into `cache` at its kv_row first. `normed`: the workspace's Buf::kNormed
// already holds rms_norm(x) with the layer's input norm (the layer before wrote it with its
// residual add), so it is not computed again.
void attention_sublayer(Workspace& ws, const TransformerShape& s, const LayerWeights& w,
                        int64_t layer, float* x, int64_t rows, const RowTables& t, KvPool& cache,
                        bool normed = false);

// out = down(silu(gate(xn)) * up(xn)) over rows; with `residual`, residual += that instead
// (Backend::linear_add, out its scratch).
void swiglu_mlp(Workspace& ws, const MlpWeights& w, const float* xn, int64_t rows, float* out,
                Buf gate_buf, Buf up_buf, Buf act_buf, float* residual = nullptr);

// A stack of pre-norm layers: attention then a dense SwiGLU MLP or a MoE block.
class LayerStack {
 public:
  // `layers` must already be resident; MoE layers get a MoeBlock built here.
  LayerStack(Backend& backend, const TransformerShape& shape, std::vector<LayerWeights> layers,
             const MoeConfig* moe);
  ~LayerStack();
  // x [rows, hidden] in place through every layer.
  void forward(Workspace& ws, float* x, int64_t rows, const RowTables& t, KvPool& cache);
  // Reserves the workspace for calls of up to `rows` rows.
  void reserve(Workspace& ws, int64_t rows) const;
  const TransformerShape& shape() const { return shape_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  MoeBlock* moe(int64_t layer) { return moe_[layer].get(); }

 private:
  TransformerShape shape_;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<MoeBlock>> moe_;
};

}  // namespace drama

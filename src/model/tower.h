// The tower (depth transformer, spec section 1): a small dense stack run once per frame and branch.
#pragma once

#include <cstdint>
#include <vector>

#include "format/checkpoint.h"
#include "model/transformer.h"

namespace drama {

// The tower (depth transformer, spec section 1). For one frame of a branch its positions are
// [P(h), P(E0(c0)), ..., P(E_{K-2}(c_{K-2}))]; position i's output through heads[i-1] gives the
// logits of codebook i.
class Tower {
 public:
  Tower(Backend& backend, const Drama3Config& config, const ModelWeights& w);

  // x [rows, Ht] = input_proj(h) for backbone hidden states h [rows, H] (after the final norm).
  void project_hidden(Workspace& ws, const float* h, int64_t rows, float* x) const;
  // x [rows, Ht] = input_proj(audio_embed[ids[r]]) for device ids already offset by
  // codebook * (codebook_size + 1).
  void project_codes(Workspace& ws, const int32_t* ids, int64_t rows, float* x) const;
  void forward(Workspace& ws, float* x, int64_t rows, const RowTables& t, KvPool& cache) {
    stack_.forward(ws, x, rows, t, cache);
  }
  // logits [rows, codebook_size] = heads[codebook - 1](norm(x[r])) over rows contiguous rows.
  void head_logits(Workspace& ws, int64_t codebook, const float* x, int64_t rows,
                   float* logits) const;
  // Reserves the workspace for a frame of up to `rows` tower rows.
  void reserve(Workspace& ws, int64_t rows) const;

  int64_t hidden() const { return stack_.shape().hidden; }
  int64_t num_layers() { return stack_.num_layers(); }
  int64_t kv_dim() const { return stack_.shape().kv_dim(); }

 private:
  const Drama3Config& config_;
  const uint16_t* audio_embed_;
  const uint16_t* norm_;
  LinearWeight input_proj_;
  std::vector<LinearWeight> heads_;
  LayerStack stack_;
};

}  // namespace drama

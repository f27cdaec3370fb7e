// The tower (depth transformer, spec section 1): a small dense stack run once per frame and branch.
#pragma once

#include <cstdint>
#include <span>
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
  void project_hidden(Exec& exec, const float* h, int64_t rows, float* x) const;
  // x [rows, Ht] = input_proj(E_{codebook[r]}(code[r])).
  void project_codes(Exec& exec, std::span<const int32_t> codebooks, std::span<const int32_t> codes,
                     float* x) const;
  void forward(Exec& exec, float* x, int64_t rows, std::span<const Segment> segments) {
    stack_.forward(exec, x, rows, segments);
  }
  // logits [rows.size(), codebook_size] = heads[codebook - 1](norm(x[rows[i]])).
  void head_logits(Exec& exec, int64_t codebook, const float* x, std::span<const int64_t> rows,
                   float* logits) const;

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

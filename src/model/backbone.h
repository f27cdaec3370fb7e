// The backbone ("talker", spec section 1): embeddings of text and audio-frame positions, the
// Qwen3-MoE style layer stack, the final norm and the codebook-0 head.
#pragma once

#include <cstdint>
#include <span>

#include "format/checkpoint.h"
#include "model/prompt.h"
#include "model/transformer.h"

namespace drama {

class Backbone {
 public:
  // `w` must already be resident on `backend`.
  Backbone(Backend& backend, const Drama3Config& config, const ModelWeights& w);

  // x [prompt.rows, H] = embeddings of the prompt rows.
  void embed_prompt(Workspace& ws, const Prompt& prompt, float* x) const;
  // x [frames, H]: a frame position embeds sum_k audio_embed[k * (codebook_size + 1) + c_k].
  void embed_frames(Workspace& ws, std::span<const int32_t> codes, int64_t frames, float* x) const;
  // The same from device ids: text rows ids [rows]; frame rows ids [rows, K], already offset by
  // k * (codebook_size + 1).
  void embed_text_ids(Workspace& ws, const int32_t* ids, int64_t rows, float* x) const;
  void embed_frame_ids(Workspace& ws, const int32_t* ids, int64_t rows, float* x) const;
  void forward(Workspace& ws, float* x, int64_t rows, const RowTables& t, KvPool& cache) {
    stack_.forward(ws, x, rows, t, cache);
  }
  // h = final_norm(x) over rows.
  void final_norm(Workspace& ws, const float* x, int64_t rows, float* h) const;
  // logits [rows, codebook_size + 1] = codebook0_head(h).
  void codebook0_logits(Workspace& ws, const float* h, int64_t rows, float* logits) const;

  LayerStack& stack() { return stack_; }
  int64_t hidden() const { return stack_.shape().hidden; }

 private:
  const Drama3Config& config_;
  const uint16_t* text_embed_;
  const uint16_t* audio_embed_;
  const uint16_t* norm_;
  LinearWeight head_;
  LayerStack stack_;
};

}  // namespace drama

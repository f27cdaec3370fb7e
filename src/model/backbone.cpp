#include "model/backbone.h"

#include <vector>

namespace drama {

Backbone::Backbone(Backend& backend, const Drama3Config& config, const ModelWeights& w)
    : config_(config),
      text_embed_(w.text_embed),
      audio_embed_(w.audio_embed),
      norm_(w.backbone_norm),
      head_(w.codebook0_head),
      stack_(backend, transformer_shape(config.backbone), w.backbone, &config.moe) {}

void Backbone::embed_prompt(Workspace& ws, const Prompt& prompt, float* x) const {
  const int64_t H = hidden(), K = config_.audio.num_codebooks;
  int64_t row = 0;
  for (const PromptRun& run : prompt.runs) {
    if (run.audio) {
      const int64_t frames = static_cast<int64_t>(run.ids.size()) / K;
      embed_frames(ws, run.ids, frames, x + row * H);
      row += frames;
    } else {
      const int64_t n = static_cast<int64_t>(run.ids.size());
      embed_text_ids(ws, ws.upload_i32(Buf::kIds, run.ids), n, x + row * H);
      row += n;
    }
  }
}

void Backbone::embed_frames(Workspace& ws, std::span<const int32_t> codes, int64_t frames,
                            float* x) const {
  const int64_t K = config_.audio.num_codebooks, stride = config_.audio.codebook_size + 1;
  std::vector<int32_t> rows(static_cast<size_t>(frames * K));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t k = 0; k < K; ++k)
      rows[f * K + k] = static_cast<int32_t>(k * stride + codes[f * K + k]);
  embed_frame_ids(ws, ws.upload_i32(Buf::kIds, rows), frames, x);
}

void Backbone::embed_text_ids(Workspace& ws, const int32_t* ids, int64_t rows, float* x) const {
  if (rows > 0) ws.backend().embed_sum(text_embed_, hidden(), ids, rows, 1, x);
}

void Backbone::embed_frame_ids(Workspace& ws, const int32_t* ids, int64_t rows, float* x) const {
  if (rows > 0)
    ws.backend().embed_sum(audio_embed_, hidden(), ids, rows, config_.audio.num_codebooks, x);
}

void Backbone::final_norm(Workspace& ws, const float* x, int64_t rows, float* h) const {
  ws.backend().rms_norm(x, norm_, rows, hidden(), stack_.shape().eps, h);
}

void Backbone::codebook0_logits(Workspace& ws, const float* h, int64_t rows, float* logits) const {
  ws.linear(head_, h, rows, logits);
}

}  // namespace drama

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

void Backbone::embed_prompt(Exec& exec, const Prompt& prompt, float* x) const {
  const int64_t H = hidden(), K = config_.audio.num_codebooks;
  int64_t row = 0;
  for (const PromptRun& run : prompt.runs) {
    if (run.audio) {
      const int64_t frames = static_cast<int64_t>(run.ids.size()) / K;
      embed_frames(exec, run.ids, frames, x + row * H);
      row += frames;
    } else {
      const int64_t n = static_cast<int64_t>(run.ids.size());
      const int32_t* ids = exec.upload_i32(Slot::kIds, run.ids);
      exec.backend().embed_sum(text_embed_, H, ids, n, 1, x + row * H);
      row += n;
    }
  }
}

void Backbone::embed_frames(Exec& exec, std::span<const int32_t> codes, int64_t frames,
                            float* x) const {
  const int64_t K = config_.audio.num_codebooks, stride = config_.audio.codebook_size + 1;
  std::vector<int32_t> rows(static_cast<size_t>(frames * K));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t k = 0; k < K; ++k)
      rows[f * K + k] = static_cast<int32_t>(k * stride + codes[f * K + k]);
  const int32_t* ids = exec.upload_i32(Slot::kIds, rows);
  exec.backend().embed_sum(audio_embed_, hidden(), ids, frames, K, x);
}

void Backbone::final_norm(Exec& exec, const float* x, int64_t rows, float* h) const {
  exec.backend().rms_norm(x, norm_, rows, hidden(), stack_.shape().eps, h);
}

void Backbone::codebook0_logits(Exec& exec, const float* h, int64_t rows, float* logits) const {
  exec.linear(head_, h, rows, logits);
}

}  // namespace drama

#include "model/tower.h"

#include <algorithm>
#include <vector>

namespace drama {

Tower::Tower(Backend& backend, const Drama3Config& config, const ModelWeights& w)
    : config_(config),
      audio_embed_(w.audio_embed),
      norm_(w.tower_norm),
      input_proj_(w.tower_input_proj),
      heads_(w.tower_heads),
      stack_(backend, transformer_shape(config.tower), w.tower, nullptr) {}

void Tower::project_hidden(Workspace& ws, const float* h, int64_t rows, float* x) const {
  ws.linear(input_proj_, h, rows, x);
}

void Tower::project_codes(Workspace& ws, const int32_t* ids, int64_t rows, float* x) const {
  const int64_t H = config_.backbone.hidden_size;
  float* e = ws.f32(Buf::kEmbedded, rows * H);
  ws.backend().embed_sum(audio_embed_, H, ids, rows, 1, e);
  ws.linear(input_proj_, e, rows, x);
}

void Tower::head_logits(Workspace& ws, int64_t codebook, const float* x, int64_t rows,
                        float* logits) const {
  const int64_t Ht = hidden();
  float* h = ws.f32(Buf::kHeadRows, rows * Ht);
  ws.backend().rms_norm(x, norm_, rows, Ht, stack_.shape().eps, h);
  ws.linear(heads_[codebook - 1], h, rows, logits);
}

void Tower::reserve(Workspace& ws, int64_t rows) const {
  const size_t r = static_cast<size_t>(std::max<int64_t>(rows, 1)), f = sizeof(float);
  ws.reserve(Buf::kEmbedded, r * static_cast<size_t>(config_.backbone.hidden_size) * f);
  ws.reserve(Buf::kHeadRows, r * static_cast<size_t>(hidden()) * f);
  stack_.reserve(ws, rows);
}

}  // namespace drama

#include "model/tower.h"

#include <vector>

namespace drama {

Tower::Tower(Backend& backend, const Drama3Config& config, const ModelWeights& w)
    : config_(config),
      audio_embed_(w.audio_embed),
      norm_(w.tower_norm),
      input_proj_(w.tower_input_proj),
      heads_(w.tower_heads),
      stack_(backend, transformer_shape(config.tower), w.tower, nullptr) {}

void Tower::project_hidden(Exec& exec, const float* h, int64_t rows, float* x) const {
  exec.linear(input_proj_, h, rows, x);
}

void Tower::project_codes(Exec& exec, std::span<const int32_t> codebooks,
                          std::span<const int32_t> codes, float* x) const {
  const int64_t n = static_cast<int64_t>(codes.size());
  const int64_t stride = config_.audio.codebook_size + 1;
  std::vector<int32_t> ids(codes.size());
  for (int64_t r = 0; r < n; ++r) ids[r] = static_cast<int32_t>(codebooks[r] * stride + codes[r]);
  const int32_t* dev = exec.upload_i32(Slot::kIds, ids);
  const int64_t H = config_.backbone.hidden_size;
  float* e = exec.f32(Slot::kGatherIn, n * H);
  exec.backend().embed_sum(audio_embed_, H, dev, n, 1, e);
  exec.linear(input_proj_, e, n, x);
}

void Tower::head_logits(Exec& exec, int64_t codebook, const float* x, std::span<const int64_t> rows,
                        float* logits) const {
  const int64_t Ht = hidden(), n = static_cast<int64_t>(rows.size());
  float* sel = exec.f32(Slot::kGatherOut, n * Ht);
  for (int64_t i = 0; i < n; ++i) exec.copy_rows(x + rows[i] * Ht, 1, Ht, sel + i * Ht);
  exec.backend().rms_norm(sel, norm_, n, Ht, stack_.shape().eps, sel);
  exec.linear(heads_[codebook - 1], sel, n, logits);
}

}  // namespace drama

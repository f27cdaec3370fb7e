// A loaded checkpoint: config + every tensor validated against it, exposed as typed host views
// into the mapped shards (no tensor data copied). Spec sections 2-5.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "format/config.h"
#include "format/safetensors.h"

namespace drama {

struct AttentionWeights {
  LinearWeight q, k, v, o;
  const uint16_t* q_norm = nullptr;  // bf16 [head_dim]
  const uint16_t* k_norm = nullptr;
};

struct MlpWeights {
  LinearWeight gate, up, down;
};

struct MoeWeights {
  LinearWeight router;                // BF16 [num_experts or n_stored, H]
  std::vector<int32_t> original_id;   // stored index -> original expert id (increasing)
  std::vector<int32_t> logit_column;  // stored index -> router row
  std::vector<MlpWeights> experts;    // stored index order; NVFP4 or BF16
  std::optional<MlpWeights> shared_expert;
  LinearWeight shared_expert_gate;  // BF16 [1, H] when shared_expert is present
};

struct LayerWeights {
  const uint16_t* input_norm = nullptr;  // bf16 [hidden]
  AttentionWeights attn;
  const uint16_t* post_attn_norm = nullptr;  // bf16 [hidden]
  bool dense = true;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

struct ModelWeights {
  const uint16_t* text_embed = nullptr;   // bf16 [text.vocab_size, H]
  const uint16_t* audio_embed = nullptr;  // bf16 [K * (codebook_size + 1), H]
  std::vector<LayerWeights> backbone;
  const uint16_t* backbone_norm = nullptr;
  LinearWeight codebook0_head;      // [codebook_size + 1, H]
  LinearWeight tower_input_proj;    // [Ht, H]
  std::vector<LayerWeights> tower;  // all dense
  const uint16_t* tower_norm = nullptr;
  std::vector<LinearWeight> tower_heads;  // K-1 views of tower.heads.weight, each [cs, Ht]
};

class Checkpoint {
 public:
  // Reads config.json, hf_quant_config.json and the shards; refuses (drama::Error, naming the
  // tensors) any tensor that is missing, unexpected, of the wrong dtype or shape, an NVFP4 triple
  // that is incomplete, or a pruned layer whose stored experts differ from kept_experts.
  // `residency`: map the shards (zero-copy; `--mmap`) or read them into memory (the engine's
  // default).
  explicit Checkpoint(const std::filesystem::path& dir, Residency residency = Residency::Mapped);
  const Drama3Config& config() const { return config_; }
  const std::optional<QuantConfig>& quant() const { return quant_; }
  const ModelWeights& weights() const { return weights_; }
  const TensorSet& tensors() const { return tensors_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  Drama3Config config_;
  std::optional<QuantConfig> quant_;
  TensorSet tensors_;
  ModelWeights weights_;
};

}  // namespace drama

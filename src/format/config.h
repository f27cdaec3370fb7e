// config.json (model_type "drama3") and hf_quant_config.json: spec sections 2, 3 and 5.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drama {

struct TextConfig {
  std::string frontend = "bytes";  // "bytes" or "espeak-ipa" (model/text_frontend.h)
  std::string language = "en-us";  // espeak-ipa: the espeak-ng voice (language) name
  int64_t vocab_size = 260;
  int32_t bos_id = 256, eos_id = 257, pad_id = 258;
};

struct AudioConfig {
  int64_t num_codebooks = 8;
  int64_t codebook_size = 2048;
  int32_t eos_code = 2048;
  double frame_rate = 12.5;
  int64_t sample_rate = 24000;
};

struct MoeConfig {
  int64_t num_experts = 64;
  int64_t experts_per_token = 4;
  int64_t expert_intermediate_size = 512;
  bool norm_topk_prob = true;
  int64_t shared_expert_intermediate_size = 0;
  std::vector<int64_t> dense_layers = {0};
  // Pruned checkpoints: per layer, the sorted ORIGINAL expert ids stored (empty for dense layers).
  std::optional<std::vector<std::vector<int64_t>>> kept_experts;
};

struct TransformerConfig {  // backbone and tower share these fields
  int64_t hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;  // backbone only; the tower's is num_codebooks
};

struct SamplingDefaults {
  double temperature = 0.9;
  int64_t top_k = 50;
  double top_p = 1.0;
};

struct Drama3Config {
  TextConfig text;
  AudioConfig audio;
  TransformerConfig backbone;
  MoeConfig moe;
  TransformerConfig tower;
  double default_gamma = 1.5;
  SamplingDefaults sampling;
  nlohmann::json raw;  // the file as read, for tools that copy it

  bool is_dense_layer(int64_t layer) const;
  // Original expert ids stored for a MoE layer (0..num_experts-1 when unpruned).
  std::vector<int64_t> stored_experts(int64_t layer) const;
};

// Parses and validates; every error names the file and the field ("config.json: backbone.head_dim
// must be positive").
Drama3Config parse_drama3_config(const nlohmann::json& j, const std::string& label = "config.json");
Drama3Config load_drama3_config(const std::filesystem::path& path);

struct QuantConfig {
  std::string quant_algo;  // "NVFP4"
  int64_t group_size = 16;
  std::vector<std::string> exclude_modules;
};

// hf_quant_config.json; absent file = all-BF16 checkpoint (returns nullopt).
std::optional<QuantConfig> load_quant_config(const std::filesystem::path& dir);

}  // namespace drama

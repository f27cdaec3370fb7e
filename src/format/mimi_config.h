// The Mimi codec's configuration (codec/config.json, spec sections 2 and 7), with Hugging Face
// MimiConfig field names and defaults, so public Mimi configs load unchanged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drama {

struct MimiConfig {
  // Audio and SEANet convolutions.
  int64_t sampling_rate = 24000;
  int64_t audio_channels = 1;
  int64_t hidden_size = 512;
  int64_t num_filters = 64;
  int64_t num_residual_layers = 1;
  std::vector<int64_t> upsampling_ratios = {8, 6, 5, 4};
  int64_t kernel_size = 7;
  int64_t last_kernel_size = 3;
  int64_t residual_kernel_size = 3;
  int64_t dilation_growth_rate = 2;
  bool use_causal_conv = true;
  std::string pad_mode = "constant";
  int64_t compress = 2;
  double trim_right_ratio = 1.0;
  bool use_conv_shortcut = false;
  int64_t upsample_groups = 512;
  // Split residual vector quantizer.
  int64_t codebook_size = 2048;
  int64_t codebook_dim = 256;
  int64_t num_quantizers = 32;
  int64_t vector_quantization_hidden_dimension = 256;
  int64_t num_semantic_quantizers = 1;
  // Encoder and decoder transformers.
  int64_t num_hidden_layers = 8;
  int64_t intermediate_size = 2048;
  int64_t num_attention_heads = 8;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 64;
  std::string hidden_act = "gelu";
  int64_t max_position_embeddings = 8000;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;  // rope_parameters.rope_theta (older configs: top-level rope_theta)
  int64_t sliding_window = 250;
  double layer_scale_initial_scale = 0.01;
  bool attention_bias = false;

  // Samples per SEANet step (prod(upsampling_ratios)); the frame adds the 2x down/upsample.
  int64_t hop_length() const;
  int64_t samples_per_frame() const { return 2 * hop_length(); }
  double frame_rate() const;  // sampling_rate / prod(upsampling_ratios) / 2
  // Kernel of the 2x downsample conv and upsample transposed conv (HF: 2 * encodec/frame ratio).
  int64_t resample_kernel() const { return 4; }
  // Whether the quantizers project hidden_size <-> vector_quantization_hidden_dimension.
  bool has_quantizer_projections() const {
    return vector_quantization_hidden_dimension != hidden_size;
  }
};

// Reads and validates; errors name the file and the field. Fields MimiConfig has that do not
// change the architecture (initializer_range, use_cache, id2label, ...) are accepted and ignored.
MimiConfig parse_mimi_config(const nlohmann::json& j, const std::string& label);
MimiConfig load_mimi_config(const std::filesystem::path& path);
// The config as Hugging Face writes it (model_type "mimi", rope_parameters nested).
nlohmann::json mimi_config_to_json(const MimiConfig& c);

}  // namespace drama

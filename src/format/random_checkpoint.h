// Random-weight checkpoints (`drama make-checkpoint`): valid for any config, deterministic (same
// config and seed, same bytes), with scales chosen so activations stay in range through all layers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "format/mimi_config.h"

namespace drama {

struct RandomCheckpointOptions {
  nlohmann::json config;  // a drama3 config.json (validated)
  uint64_t seed = 1;
  bool nvfp4 = false;                  // experts in NVFP4 + hf_quant_config.json
  std::optional<int64_t> prune_to;     // keep this many experts per MoE layer
  std::string router_layout = "full";  // pruned router: "full" rows or "sliced" (kept order)
  std::string name;                    // manifest name; default derived from the options
};

// Writes config.json, hf_quant_config.json (NVFP4), shards (+ index when sharded), codec/ (random
// Mimi codec at the geometry of config["codec"] or a small default) and manifest.json listing
// every file. The directory must not exist; it is built in a temporary sibling and renamed.
void write_random_checkpoint(const RandomCheckpointOptions& options,
                             const std::filesystem::path& out_dir);

// Writes `dir`/config.json and `dir`/model.safetensors: a random float32 Mimi codec with Hugging
// Face MimiModel tensor names (the directory must exist). Deterministic in (config, seed).
void write_random_codec(const MimiConfig& config, uint64_t seed, const std::filesystem::path& dir);

// The small codec used when a drama config has no "codec" object: 24 kHz, 12.5 frames/s,
// hidden 32, 8 filters, 2 transformer layers, `num_quantizers` codebooks of `codebook_size`.
MimiConfig small_codec_config(int64_t codebook_size, int64_t num_quantizers);

// Counter-based generator behind every random tensor: a key per (seed, tensor name), then a
// value per element index. Values are an Irwin-Hall sum of four 16-bit uniforms scaled to unit
// variance (bounded by +-2*sqrt(3)); integer arithmetic, so the same on every machine.
uint64_t random_tensor_key(uint64_t seed, std::string_view name);
float random_unit_normal(uint64_t key, uint64_t index);

}  // namespace drama

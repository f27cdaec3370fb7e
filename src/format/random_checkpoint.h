// Random-weight checkpoints (`drama make-checkpoint`): valid for any config, deterministic (same
// config and seed, same bytes), with scales chosen so activations stay in range through all layers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace drama {

struct RandomCheckpointOptions {
  nlohmann::json config;             // a drama3 config.json (validated)
  uint64_t seed = 1;
  bool nvfp4 = false;                // experts in NVFP4 + hf_quant_config.json
  std::optional<int64_t> prune_to;   // keep this many experts per MoE layer
  std::string router_layout = "full";  // pruned router: "full" rows or "sliced" (kept order)
  std::string name;                  // manifest name; default derived from the options
};

// Writes config.json, hf_quant_config.json (NVFP4), shards (+ index when sharded), codec/ (random
// Mimi codec at the geometry of config["codec"] or a small default) and manifest.json listing
// every file. The directory must not exist; it is built in a temporary sibling and renamed.
void write_random_checkpoint(const RandomCheckpointOptions& options,
                             const std::filesystem::path& out_dir);

}  // namespace drama

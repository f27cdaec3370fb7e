// `drama quantize`: a BF16 checkpoint -> an NVFP4 one (spec section 4, ModelOpt's recipe), pruned
// to listed original expert ids on the way (section 5). Everything but the expert projections is
// copied byte for byte; the codec directory is copied unchanged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/config.h"

namespace drama {

struct QuantizeOptions {
  // Per backbone layer, the sorted original expert ids to keep (empty for dense layers); nullopt
  // keeps every stored expert.
  std::optional<std::vector<std::vector<int64_t>>> keep_experts;
  // Router rows of a pruned output: "full" (all num_experts rows), "sliced" (kept order), or ""
  // (the input's layout).
  std::string router_layout;
  std::string name;  // manifest name; default "<input directory name>-nvfp4[-pruned]"
};

// The --keep-experts file: a JSON list with one entry per backbone layer, null (or []) for dense
// layers and a list of original expert ids for MoE layers, as config.json's moe.kept_experts; or an
// object {"kept_experts": [...]}. Ids must be distinct, stored in `input`, and at least one per MoE
// layer; they are returned sorted. Errors name `label` and the layer.
std::vector<std::vector<int64_t>> parse_keep_experts(const nlohmann::json& j,
                                                     const Drama3Config& input,
                                                     const std::string& label);

// Writes config.json, hf_quant_config.json, shards (+ index), codec/ and manifest.json into
// `out_dir`, which must not exist (built in a temporary sibling and renamed; nothing is left
// behind on failure). Refuses an input that is already quantized or that fails to load.
void quantize_checkpoint(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                         const QuantizeOptions& options);

}  // namespace drama

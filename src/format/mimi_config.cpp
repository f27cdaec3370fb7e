// Mimi codec config (Hugging Face MimiConfig names and defaults), spec sections 2 and 7.
#include "format/mimi_config.h"

#include <cmath>

#include "util/error.h"
#include "util/fs.h"

namespace drama {

using nlohmann::json;

namespace {

class Reader {
 public:
  Reader(const json& j, const std::string& label) : j_(j), label_(label) {
    if (!j.is_object()) throw Error(label + ": the top level must be a JSON object");
  }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(label_ + ": " + field + " " + what);
  }
  void read(const char* field, int64_t& v, int64_t min = 1) const {
    if (!j_.contains(field)) return;
    if (!j_.at(field).is_number_integer()) fail(field, "must be an integer");
    v = j_.at(field).get<int64_t>();
    if (v < min)
      fail(field, "must be at least " + std::to_string(min) + " (got " + std::to_string(v) + ")");
  }
  void read(const char* field, double& v) const {
    if (!j_.contains(field)) return;
    if (!j_.at(field).is_number()) fail(field, "must be a number");
    v = j_.at(field).get<double>();
    if (!std::isfinite(v)) fail(field, "must be finite");
  }
  void read(const char* field, bool& v) const {
    if (!j_.contains(field)) return;
    if (!j_.at(field).is_boolean()) fail(field, "must be true or false");
    v = j_.at(field).get<bool>();
  }
  void read(const char* field, std::string& v) const {
    if (!j_.contains(field)) return;
    if (!j_.at(field).is_string()) fail(field, "must be a string");
    v = j_.at(field).get<std::string>();
  }
  void read(const char* field, std::vector<int64_t>& v) const {
    if (!j_.contains(field)) return;
    const json& a = j_.at(field);
    if (!a.is_array() || a.empty()) fail(field, "must be a non-empty list of integers");
    v.clear();
    for (const json& e : a) {
      if (!e.is_number_integer() || e.get<int64_t>() < 1)
        fail(field, "must be a list of positive integers");
      v.push_back(e.get<int64_t>());
    }
  }

 private:
  const json& j_;
  std::string label_;
};

}  // namespace

int64_t MimiConfig::hop_length() const {
  int64_t p = 1;
  for (int64_t r : upsampling_ratios) p *= r;
  return p;
}

double MimiConfig::frame_rate() const {
  return static_cast<double>(sampling_rate) / static_cast<double>(samples_per_frame());
}

MimiConfig parse_mimi_config(const json& j, const std::string& label) {
  Reader r(j, label);
  MimiConfig c;
  r.read("sampling_rate", c.sampling_rate);
  r.read("audio_channels", c.audio_channels);
  r.read("hidden_size", c.hidden_size);
  r.read("num_filters", c.num_filters);
  r.read("num_residual_layers", c.num_residual_layers, 0);
  r.read("upsampling_ratios", c.upsampling_ratios);
  r.read("kernel_size", c.kernel_size);
  r.read("last_kernel_size", c.last_kernel_size);
  r.read("residual_kernel_size", c.residual_kernel_size);
  r.read("dilation_growth_rate", c.dilation_growth_rate);
  r.read("use_causal_conv", c.use_causal_conv);
  r.read("pad_mode", c.pad_mode);
  r.read("compress", c.compress);
  r.read("trim_right_ratio", c.trim_right_ratio);
  r.read("use_conv_shortcut", c.use_conv_shortcut);
  r.read("upsample_groups", c.upsample_groups);
  r.read("codebook_size", c.codebook_size);
  r.read("codebook_dim", c.codebook_dim);
  r.read("num_quantizers", c.num_quantizers);
  r.read("vector_quantization_hidden_dimension", c.vector_quantization_hidden_dimension);
  r.read("num_semantic_quantizers", c.num_semantic_quantizers, 0);
  r.read("num_hidden_layers", c.num_hidden_layers, 0);
  r.read("intermediate_size", c.intermediate_size);
  r.read("num_attention_heads", c.num_attention_heads);
  r.read("num_key_value_heads", c.num_key_value_heads);
  r.read("head_dim", c.head_dim);
  r.read("hidden_act", c.hidden_act);
  r.read("max_position_embeddings", c.max_position_embeddings);
  r.read("norm_eps", c.norm_eps);
  r.read("rope_theta", c.rope_theta);  // transformers 4.x wrote it at the top level
  if (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) {
    const json& rope = j.at("rope_parameters");
    if (!rope.is_object()) r.fail("rope_parameters", "must be an object");
    Reader(rope, label + ": rope_parameters").read("rope_theta", c.rope_theta);
    if (rope.contains("rope_type") && rope.at("rope_type") != "default")
      r.fail("rope_parameters.rope_type", "must be \"default\"");
  }
  r.read("sliding_window", c.sliding_window, 0);
  r.read("layer_scale_initial_scale", c.layer_scale_initial_scale);
  r.read("attention_bias", c.attention_bias);

  if (c.audio_channels > 2) r.fail("audio_channels", "must be 1 or 2");
  if (c.pad_mode != "constant" && c.pad_mode != "replicate" && c.pad_mode != "reflect")
    r.fail("pad_mode", "must be \"constant\", \"replicate\" or \"reflect\"");
  if (!(c.trim_right_ratio >= 0 && c.trim_right_ratio <= 1))
    r.fail("trim_right_ratio", "must be in [0, 1]");
  if (!c.use_causal_conv && c.trim_right_ratio != 1.0)
    r.fail("trim_right_ratio", "must be 1.0 when use_causal_conv is false");
  if (c.hidden_size % c.upsample_groups != 0) r.fail("upsample_groups", "must divide hidden_size");
  if ((c.codebook_size & (c.codebook_size - 1)) != 0)
    r.fail("codebook_size", "must be a power of 2");
  if (c.codebook_dim != c.vector_quantization_hidden_dimension)
    r.fail("codebook_dim",
           "must equal vector_quantization_hidden_dimension (the codebooks live "
           "in the quantizer's projected space)");
  if (c.num_semantic_quantizers > c.num_quantizers)
    r.fail("num_semantic_quantizers", "must not exceed num_quantizers");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_attention_heads", "must be a multiple of num_key_value_heads");
  if (c.hidden_size % c.num_attention_heads != 0)
    r.fail("num_attention_heads", "must divide hidden_size");
  if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even");
  if (c.hidden_act != "gelu")
    r.fail("hidden_act", "\"" + c.hidden_act + "\" is not supported (only \"gelu\")");
  if (!(c.norm_eps > 0)) r.fail("norm_eps", "must be positive");
  if (!(c.rope_theta > 0)) r.fail("rope_theta", "must be positive");
  for (const char* key : {"frame_rate", "_frame_rate"})
    if (j.contains(key) && !j.at(key).is_null()) {
      if (!j.at(key).is_number()) r.fail(key, "must be a number");
      if (std::fabs(j.at(key).get<double>() - c.frame_rate()) > 1e-9)
        r.fail(key, "(" + j.at(key).dump() +
                        ") disagrees with sampling_rate / prod(upsampling_ratios) / 2 = " +
                        std::to_string(c.frame_rate()));
    }
  return c;
}

MimiConfig load_mimi_config(const std::filesystem::path& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON (" + e.what() + ")");
  }
  return parse_mimi_config(j, path.string());
}

json mimi_config_to_json(const MimiConfig& c) {
  return json{{"model_type", "mimi"},
              {"architectures", {"MimiModel"}},
              {"sampling_rate", c.sampling_rate},
              {"audio_channels", c.audio_channels},
              {"hidden_size", c.hidden_size},
              {"num_filters", c.num_filters},
              {"num_residual_layers", c.num_residual_layers},
              {"upsampling_ratios", c.upsampling_ratios},
              {"kernel_size", c.kernel_size},
              {"last_kernel_size", c.last_kernel_size},
              {"residual_kernel_size", c.residual_kernel_size},
              {"dilation_growth_rate", c.dilation_growth_rate},
              {"use_causal_conv", c.use_causal_conv},
              {"pad_mode", c.pad_mode},
              {"compress", c.compress},
              {"trim_right_ratio", c.trim_right_ratio},
              {"use_conv_shortcut", c.use_conv_shortcut},
              {"upsample_groups", c.upsample_groups},
              {"codebook_size", c.codebook_size},
              {"codebook_dim", c.codebook_dim},
              {"num_quantizers", c.num_quantizers},
              {"vector_quantization_hidden_dimension", c.vector_quantization_hidden_dimension},
              {"num_semantic_quantizers", c.num_semantic_quantizers},
              {"num_hidden_layers", c.num_hidden_layers},
              {"intermediate_size", c.intermediate_size},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_key_value_heads},
              {"head_dim", c.head_dim},
              {"hidden_act", c.hidden_act},
              {"max_position_embeddings", c.max_position_embeddings},
              {"norm_eps", c.norm_eps},
              {"rope_parameters", {{"rope_theta", c.rope_theta}, {"rope_type", "default"}}},
              {"sliding_window", c.sliding_window},
              {"layer_scale_initial_scale", c.layer_scale_initial_scale},
              {"attention_bias", c.attention_bias}};
}

}  // namespace drama

// config.json (model_type "drama3") and hf_quant_config.json: spec sections 2, 3 and 5.
// Every field is read with its type checked; unknown keys inside a known section are refused so a
// misspelt field never silently falls back to its default.
#include "format/config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Reads the fields of one JSON object, naming "label: section.field" in every error.
class Section {
 public:
  Section(const json& parent, const std::string& key, const std::string& label,
          const std::string& path, bool required)
      : label_(label), path_(path) {
    if (!parent.contains(key)) {
      if (required) fail("", "is required");
      return;
    }
    obj_ = &parent.at(key);
    if (!obj_->is_object()) fail("", "must be an object");
  }
  Section(const json& obj, const std::string& label) : obj_(&obj), label_(label) {
    if (!obj.is_object()) throw Error(label + ": the top level must be a JSON object");
  }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    std::string name = path_;
    if (!field.empty()) name += (name.empty() ? "" : ".") + field;
    throw Error(label_ + ": " + name + " " + what);
  }
  std::string name(const std::string& field) const {
    return path_.empty() ? field : path_ + "." + field;
  }
  bool has(const std::string& field) const { return obj_ && obj_->contains(field); }
  const json& at(const std::string& field) const { return obj_->at(field); }

  int64_t integer(const std::string& field, std::optional<int64_t> fallback) {
    seen_.insert(field);
    if (!has(field)) {
      if (!fallback) fail(field, "is required");
      return *fallback;
    }
    const json& v = at(field);
    if (!v.is_number_integer()) fail(field, "must be an integer");
    return v.get<int64_t>();
  }
  int64_t positive(const std::string& field, std::optional<int64_t> fallback = std::nullopt) {
    const int64_t v = integer(field, fallback);
    if (v <= 0) fail(field, "must be positive (got " + std::to_string(v) + ")");
    return v;
  }
  double number(const std::string& field, std::optional<double> fallback) {
    seen_.insert(field);
    if (!has(field)) {
      if (!fallback) fail(field, "is required");
      return *fallback;
    }
    const json& v = at(field);
    if (!v.is_number()) fail(field, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(field, "must be finite");
    return d;
  }
  double positive_number(const std::string& field, std::optional<double> fallback) {
    const double d = number(field, fallback);
    if (!(d > 0)) fail(field, "must be positive (got " + std::to_string(d) + ")");
    return d;
  }
  bool boolean(const std::string& field, bool fallback) {
    seen_.insert(field);
    if (!has(field)) return fallback;
    if (!at(field).is_boolean()) fail(field, "must be true or false");
    return at(field).get<bool>();
  }
  std::string string(const std::string& field, std::optional<std::string> fallback) {
    seen_.insert(field);
    if (!has(field)) {
      if (!fallback) fail(field, "is required");
      return *fallback;
    }
    if (!at(field).is_string()) fail(field, "must be a string");
    return at(field).get<std::string>();
  }
  void skip(const std::string& field) { seen_.insert(field); }
  // Refuses keys nobody asked for (typos).
  void refuse_unknown() const {
    if (!obj_) return;
    for (const auto& [key, value] : obj_->items())
      if (!seen_.count(key)) fail(key, "is not a known field");
  }

 private:
  const json* obj_ = nullptr;
  std::string label_, path_;
  std::set<std::string> seen_;
};

TransformerConfig parse_transformer(const json& j, const std::string& key, const std::string& label,
                                    double default_theta, bool backbone) {
  Section s(j, key, label, key, true);
  TransformerConfig t;
  t.hidden_size = s.positive("hidden_size");
  t.num_layers = s.positive("num_layers");
  t.num_heads = s.positive("num_heads");
  t.num_kv_heads = s.positive("num_kv_heads");
  t.head_dim = s.positive("head_dim");
  t.intermediate_size = s.positive("intermediate_size");
  t.rms_norm_eps = s.positive_number("rms_norm_eps", 1e-6);
  t.rope_theta = s.positive_number("rope_theta", default_theta);
  if (backbone) {
    t.max_position_embeddings = s.positive("max_position_embeddings");
    s.skip("moe");
  }
  if (t.num_heads % t.num_kv_heads != 0)
    s.fail("num_heads", "(" + std::to_string(t.num_heads) + ") must be a multiple of " +
                            s.name("num_kv_heads") + " (" + std::to_string(t.num_kv_heads) + ")");
  if (t.head_dim % 2 != 0) s.fail("head_dim", "must be even (rotary embeddings rotate pairs)");
  s.refuse_unknown();
  return t;
}

std::vector<int64_t> parse_id_list(const json& v, const Section& s, const std::string& field,
                                   int64_t limit, const std::string& limit_name) {
  if (!v.is_array()) s.fail(field, "must be a list of integers");
  std::vector<int64_t> ids;
  for (const json& e : v) {
    if (!e.is_number_integer()) s.fail(field, "must be a list of integers");
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id >= limit)
      s.fail(field, "holds " + std::to_string(id) + ", outside [0, " + limit_name + " = " +
                        std::to_string(limit) + ")");
    if (!ids.empty() && id <= ids.back()) s.fail(field, "must be sorted and unique");
    ids.push_back(id);
  }
  return ids;
}

MoeConfig parse_moe(const json& j, const std::string& label, int64_t num_layers) {
  Section s(j.at("backbone"), "moe", label, "backbone.moe", true);
  MoeConfig m;
  m.num_experts = s.positive("num_experts");
  m.experts_per_token = s.positive("experts_per_token");
  if (m.experts_per_token > m.num_experts)
    s.fail("experts_per_token", "(" + std::to_string(m.experts_per_token) +
                                    ") must not exceed num_experts (" +
                                    std::to_string(m.num_experts) + ")");
  m.expert_intermediate_size = s.positive("expert_intermediate_size");
  m.norm_topk_prob = s.boolean("norm_topk_prob", true);
  m.shared_expert_intermediate_size = s.integer("shared_expert_intermediate_size", 0);
  if (m.shared_expert_intermediate_size < 0)
    s.fail("shared_expert_intermediate_size", "must not be negative");
  s.skip("dense_layers");
  if (s.has("dense_layers"))
    m.dense_layers =
        parse_id_list(s.at("dense_layers"), s, "dense_layers", num_layers, "backbone.num_layers");
  s.skip("kept_experts");
  if (s.has("kept_experts") && !s.at("kept_experts").is_null()) {
    const json& kept = s.at("kept_experts");
    if (!kept.is_array() || static_cast<int64_t>(kept.size()) != num_layers)
      s.fail("kept_experts", "must be null or a list of backbone.num_layers (" +
                                 std::to_string(num_layers) + ") entries");
    std::vector<std::vector<int64_t>> layers(num_layers);
    for (int64_t l = 0; l < num_layers; ++l) {
      const std::string field = "kept_experts[" + std::to_string(l) + "]";
      const bool dense = std::binary_search(m.dense_layers.begin(), m.dense_layers.end(), l);
      if (dense) {
        if (!kept[l].is_null()) s.fail(field, "must be null for a dense layer");
        continue;
      }
      if (kept[l].is_null()) s.fail(field, "must list the stored experts of this MoE layer");
      layers[l] = parse_id_list(kept[l], s, field, m.num_experts, "num_experts");
      if (static_cast<int64_t>(layers[l].size()) < m.experts_per_token)
        s.fail(field, "keeps " + std::to_string(layers[l].size()) +
                          " experts, fewer than experts_per_token (" +
                          std::to_string(m.experts_per_token) + ")");
    }
    m.kept_experts = std::move(layers);
  }
  s.refuse_unknown();
  return m;
}

}  // namespace

bool Drama3Config::is_dense_layer(int64_t layer) const {
  return std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), layer);
}

std::vector<int64_t> Drama3Config::stored_experts(int64_t layer) const {
  if (is_dense_layer(layer)) return {};
  if (moe.kept_experts) return (*moe.kept_experts)[layer];
  std::vector<int64_t> ids(moe.num_experts);
  for (int64_t e = 0; e < moe.num_experts; ++e) ids[e] = e;
  return ids;
}

Drama3Config parse_drama3_config(const json& j, const std::string& label) {
  Section top(j, label);
  Drama3Config c;
  const std::string model_type = top.string("model_type", std::nullopt);
  if (model_type != "drama3")
    top.fail("model_type", "must be \"drama3\" (got \"" + model_type + "\")");

  {
    Section s(j, "text", label, "text", true);
    c.text.frontend = s.string("frontend", "bytes");
    if (c.text.frontend != "bytes" && c.text.frontend != "espeak-ipa")
      s.fail("frontend",
             "\"" + c.text.frontend + "\" is not supported (\"bytes\" or \"espeak-ipa\")");
    c.text.language = s.string("language", "en-us");
    if (c.text.language.empty()) s.fail("language", "must not be empty");
    c.text.vocab_size = s.positive("vocab_size", 260);
    c.text.bos_id = static_cast<int32_t>(s.integer("bos_id", 256));
    c.text.eos_id = static_cast<int32_t>(s.integer("eos_id", 257));
    c.text.pad_id = static_cast<int32_t>(s.integer("pad_id", 258));
    // Byte ids 0..255 are the text; the specials live above them, inside the vocabulary.
    for (const auto& [field, id] :
         {std::pair{"bos_id", c.text.bos_id}, {"eos_id", c.text.eos_id}, {"pad_id", c.text.pad_id}})
      if (id < 256 || id >= c.text.vocab_size)
        s.fail(field, "(" + std::to_string(id) + ") must be in [256, text.vocab_size = " +
                          std::to_string(c.text.vocab_size) + ")");
    if (c.text.bos_id == c.text.eos_id || c.text.bos_id == c.text.pad_id ||
        c.text.eos_id == c.text.pad_id)
      s.fail("bos_id", "must differ from text.eos_id and text.pad_id, which must differ too");
    s.refuse_unknown();
  }
  {
    Section s(j, "audio", label, "audio", true);
    c.audio.num_codebooks = s.positive("num_codebooks", 8);
    if (c.audio.num_codebooks < 2)
      s.fail("num_codebooks", "must be at least 2 (codebook 0 plus the tower's)");
    c.audio.codebook_size = s.positive("codebook_size", 2048);
    const int64_t eos = s.integer("eos_code", c.audio.codebook_size);
    if (eos != c.audio.codebook_size)
      s.fail("eos_code", "(" + std::to_string(eos) + ") must equal audio.codebook_size (" +
                             std::to_string(c.audio.codebook_size) + ")");
    c.audio.eos_code = static_cast<int32_t>(eos);
    c.audio.frame_rate = s.positive_number("frame_rate", 12.5);
    c.audio.sample_rate = s.positive("sample_rate", 24000);
    s.refuse_unknown();
  }
  c.backbone = parse_transformer(j, "backbone", label, 1000000.0, true);
  c.moe = parse_moe(j, label, c.backbone.num_layers);
  c.tower = parse_transformer(j, "tower", label, 10000.0, false);
  {
    Section s(j, "guidance", label, "guidance", false);
    c.default_gamma = s.number("default_gamma", 1.5);
    if (c.default_gamma < 0) s.fail("default_gamma", "must not be negative");
    s.refuse_unknown();
  }
  {
    Section s(j, "sampling", label, "sampling", false);
    c.sampling.temperature = s.number("temperature", 0.9);
    if (c.sampling.temperature < 0) s.fail("temperature", "must not be negative");
    c.sampling.top_k = s.integer("top_k", 50);
    if (c.sampling.top_k < 0) s.fail("top_k", "must not be negative (0 = no top-k)");
    c.sampling.top_p = s.number("top_p", 1.0);
    if (!(c.sampling.top_p > 0 && c.sampling.top_p <= 1)) s.fail("top_p", "must be in (0, 1]");
    s.refuse_unknown();
  }
  // Other top-level keys (codec geometry for make-checkpoint, architectures, ...) are not ours.
  c.raw = j;
  return c;
}

Drama3Config load_drama3_config(const fs::path& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON (" + e.what() + ")");
  }
  return parse_drama3_config(j, path.string());
}

std::optional<QuantConfig> load_quant_config(const fs::path& dir) {
  const fs::path path = dir / "hf_quant_config.json";
  if (!fs::exists(path)) return std::nullopt;
  const std::string label = path.string();
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(label + ": invalid JSON (" + e.what() + ")");
  }
  Section top(j, label);
  top.skip("producer");  // ModelOpt writes {"producer": {"name", "version"}}
  Section s(j, "quantization", label, "quantization", true);
  top.skip("quantization");
  top.refuse_unknown();
  QuantConfig q;
  q.quant_algo = s.string("quant_algo", std::nullopt);
  if (q.quant_algo != "NVFP4")
    s.fail("quant_algo", "\"" + q.quant_algo + "\" is not supported (only \"NVFP4\")");
  q.group_size = s.integer("group_size", 16);
  if (q.group_size != 16)
    s.fail("group_size", std::to_string(q.group_size) + " is not supported (NVFP4 uses 16)");
  s.skip("kv_cache_quant_algo");
  if (s.has("kv_cache_quant_algo") && !s.at("kv_cache_quant_algo").is_null())
    s.fail("kv_cache_quant_algo", "must be null (a quantized KV cache is not supported)");
  s.skip("exclude_modules");
  if (s.has("exclude_modules")) {
    const json& ex = s.at("exclude_modules");
    if (!ex.is_array()) s.fail("exclude_modules", "must be a list of strings");
    for (const json& e : ex) {
      if (!e.is_string()) s.fail("exclude_modules", "must be a list of strings");
      q.exclude_modules.push_back(e.get<std::string>());
    }
  }
  s.refuse_unknown();
  return q;
}

}  // namespace drama

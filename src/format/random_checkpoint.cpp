// Random-weight checkpoints (`drama make-checkpoint`), spec sections 2-5. Every value comes from a
// counter keyed by (seed, tensor name, element index), so a tensor's bytes never depend on which
// other tensors exist: a pruned checkpoint's kept experts equal the unpruned ones byte for byte.
// Weight scales are explained in docs/checkpoints.md.
#include "format/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "format/config.h"
#include "format/manifest.h"
#include "format/nvfp4.h"
#include "format/safetensors.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sampling.h"

namespace drama {

namespace fs = std::filesystem;
using nlohmann::json;

uint64_t random_tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ h);
}

float random_unit_normal(uint64_t key, uint64_t index) {
  const uint64_t z = mix64(key + 0x9e3779b97f4a7c15ull * (index + 1));
  const int64_t sum =
      static_cast<int64_t>((z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48));
  // Four uniforms on {0..65535}: mean 131070, variance 4 * (65536^2 - 1) / 12.
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) / 65536
  return static_cast<float>(sum - 131070) * kScale;
}

namespace {

struct PlannedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t group;  // index into the plan's generators
  uint64_t bytes() const {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

using TensorBytes = std::map<std::string, std::vector<uint8_t>>;

// The tensor list of a checkpoint and, per group of tensors made together, its generator.
class Plan {
 public:
  Plan(uint64_t seed, bool nvfp4) : seed_(seed), nvfp4_(nvfp4) {}

  std::vector<float> values(const std::string& name, int64_t n, double std, double mean = 0) const {
    std::vector<float> v(static_cast<size_t>(n));
    const uint64_t key = random_tensor_key(seed_, name);
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<float>(mean + std * random_unit_normal(key, static_cast<uint64_t>(i)));
    return v;
  }
  static std::vector<uint8_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint8_t> out(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t b = f32_to_bf16(v[i]);
      out[2 * i] = static_cast<uint8_t>(b & 0xff);
      out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
    return out;
  }

  // A BF16 tensor of N(mean, std^2)-like values.
  void bf16(const std::string& name, std::vector<int64_t> shape, double std, double mean = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    add_group({{name, DType::BF16, shape, 0}}, [this, name, n, std, mean] {
      return TensorBytes{{name, to_bf16(values(name, n, std, mean))}};
    });
  }
  void norm(const std::string& name, int64_t dim) { bf16(name, {dim}, 0.05, 1.0); }

  // The router of a MoE layer: the full [num_experts, H] matrix, or its `rows` in that order.
  void router(const std::string& name, int64_t num_experts, int64_t h, double std,
              std::vector<int64_t> rows) {
    const int64_t out = rows.empty() ? num_experts : static_cast<int64_t>(rows.size());
    add_group({{name, DType::BF16, {out, h}, 0}}, [this, name, num_experts, h, std, rows] {
      const std::vector<float> full = values(name, num_experts * h, std);
      if (rows.empty()) return TensorBytes{{name, to_bf16(full)}};
      std::vector<float> sliced;
      for (int64_t r : rows)
        sliced.insert(sliced.end(), full.begin() + r * h, full.begin() + (r + 1) * h);
      return TensorBytes{{name, to_bf16(sliced)}};
    });
  }

  // gate/up [inter, h] and down [h, inter] of one expert, BF16 or NVFP4. With NVFP4 and
  // `share_scale2`, gate and up share the larger of their two tensor scales (as ModelOpt does).
  void expert(const std::string& p, int64_t h, int64_t inter, double down_std, bool share_scale2) {
    struct Part {
      std::string prefix;
      int64_t out, in;
      double std;
    };
    const std::vector<Part> parts = {{p + ".gate_proj", inter, h, 1.0 / std::sqrt(double(h))},
                                     {p + ".up_proj", inter, h, 1.0 / std::sqrt(double(h))},
                                     {p + ".down_proj", h, inter, down_std}};
    std::vector<PlannedTensor> tensors;
    for (const Part& part : parts) {
      if (!nvfp4_) {
        tensors.push_back({part.prefix + ".weight", DType::BF16, {part.out, part.in}, 0});
        continue;
      }
      tensors.push_back({part.prefix + ".weight", DType::U8, {part.out, part.in / 2}, 0});
      tensors.push_back(
          {part.prefix + ".weight_scale", DType::F8_E4M3, {part.out, part.in / 16}, 0});
      tensors.push_back({part.prefix + ".weight_scale_2", DType::F32, {}, 0});
    }
    add_group(std::move(tensors), [this, parts, share_scale2] {
      TensorBytes out;
      std::vector<std::vector<float>> w;
      for (const Part& part : parts)
        w.push_back(values(part.prefix + ".weight", part.out * part.in, part.std));
      if (!nvfp4_) {
        for (size_t i = 0; i < parts.size(); ++i) out[parts[i].prefix + ".weight"] = to_bf16(w[i]);
        return out;
      }
      std::optional<float> shared;
      if (share_scale2) shared = std::max(nvfp4_tensor_scale(w[0]), nvfp4_tensor_scale(w[1]));
      for (size_t i = 0; i < parts.size(); ++i) {
        const Nvfp4Matrix q =
            nvfp4_quantize(w[i], parts[i].out, parts[i].in, i < 2 ? shared : std::nullopt);
        out[parts[i].prefix + ".weight"] = q.codes;
        out[parts[i].prefix + ".weight_scale"] = q.scales;
        std::vector<uint8_t> s2(4);
        std::memcpy(s2.data(), &q.scale2, 4);
        out[parts[i].prefix + ".weight_scale_2"] = s2;
      }
      return out;
    });
  }

  std::vector<PlannedTensor> sorted_tensors() const {
    std::vector<PlannedTensor> t = tensors_;
    std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return t;
  }
  // Bytes of one tensor; a group is generated once and kept until all its tensors were taken.
  std::vector<uint8_t> take(const PlannedTensor& t) {
    auto it = cache_.find(t.group);
    if (it == cache_.end()) it = cache_.emplace(t.group, generators_[t.group]()).first;
    auto node = it->second.extract(t.name);
    if (it->second.empty()) cache_.erase(it);
    if (node.empty())
      throw Error("random checkpoint: internal error, tensor " + t.name + " was not generated");
    return std::move(node.mapped());
  }

 private:
  void add_group(std::vector<PlannedTensor> tensors, std::function<TensorBytes()> make) {
    for (auto& t : tensors) {
      t.group = generators_.size();
      tensors_.push_back(std::move(t));
    }
    generators_.push_back(std::move(make));
  }

  uint64_t seed_;
  bool nvfp4_;
  std::vector<PlannedTensor> tensors_;
  std::vector<std::function<TensorBytes()>> generators_;
  std::map<size_t, TensorBytes> cache_;
};

// Scales (docs/checkpoints.md): inputs to every projection are RMS-normalised, so fan-in scaling
// keeps outputs near unit size; residual-branch outputs are further divided by sqrt(2 * layers)
// so the residual stream stays near unit size at any depth; heads give logits of std ~1.5.
void plan_layer(Plan& plan, const std::string& p, const TransformerConfig& t,
                int64_t total_layers) {
  const int64_t h = t.hidden_size, q = t.num_heads * t.head_dim, kv = t.num_kv_heads * t.head_dim;
  const double in_std = 1.0 / std::sqrt(double(h));
  const double residual = 1.0 / std::sqrt(2.0 * double(total_layers));
  plan.norm(p + ".input_norm.weight", h);
  plan.bf16(p + ".attn.q_proj.weight", {q, h}, in_std);
  plan.bf16(p + ".attn.k_proj.weight", {kv, h}, in_std);
  plan.bf16(p + ".attn.v_proj.weight", {kv, h}, in_std);
  plan.bf16(p + ".attn.o_proj.weight", {h, q}, residual / std::sqrt(double(q)));
  plan.norm(p + ".attn.q_norm.weight", t.head_dim);
  plan.norm(p + ".attn.k_norm.weight", t.head_dim);
  plan.norm(p + ".post_attn_norm.weight", h);
}

void plan_dense_mlp(Plan& plan, const std::string& p, int64_t h, int64_t inter, int64_t layers) {
  plan.bf16(p + ".gate_proj.weight", {inter, h}, 1.0 / std::sqrt(double(h)));
  plan.bf16(p + ".up_proj.weight", {inter, h}, 1.0 / std::sqrt(double(h)));
  plan.bf16(p + ".down_proj.weight", {h, inter},
            1.0 / std::sqrt(2.0 * double(layers) * double(inter)));
}

void plan_model(Plan& plan, const Drama3Config& c, bool sliced_router) {
  const int64_t h = c.backbone.hidden_size, ht = c.tower.hidden_size, k = c.audio.num_codebooks,
                cs = c.audio.codebook_size, layers = c.backbone.num_layers;
  plan.bf16("text_embed.weight", {c.text.vocab_size, h}, 1.0);
  // An audio position sums K embeddings: 1/sqrt(K) each keeps the sum near unit size.
  plan.bf16("audio_embed.weight", {k * (cs + 1), h}, 1.0 / std::sqrt(double(k)));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "backbone.layers." + std::to_string(l);
    plan_layer(plan, p, c.backbone, layers);
    if (c.is_dense_layer(l)) {
      plan_dense_mlp(plan, p + ".mlp", h, c.backbone.intermediate_size, layers);
      continue;
    }
    const std::vector<int64_t> stored = c.stored_experts(l);
    const bool pruned = static_cast<int64_t>(stored.size()) != c.moe.num_experts;
    plan.router(p + ".mlp.router.weight", c.moe.num_experts, h, 1.0 / std::sqrt(double(h)),
                pruned && sliced_router ? stored : std::vector<int64_t>{});
    const int64_t inter = c.moe.expert_intermediate_size;
    const double down_std = 1.0 / std::sqrt(2.0 * double(layers) * double(inter));
    for (int64_t e : stored)
      plan.expert(p + ".mlp.experts." + std::to_string(e), h, inter, down_std, e % 2 == 1);
    if (c.moe.shared_expert_intermediate_size > 0) {
      const int64_t si = c.moe.shared_expert_intermediate_size;
      plan.expert(p + ".mlp.shared_expert", h, si,
                  1.0 / std::sqrt(2.0 * double(layers) * double(si)), false);
      plan.bf16(p + ".mlp.shared_expert_gate.weight", {1, h}, 1.0 / std::sqrt(double(h)));
    }
  }
  plan.norm("backbone.norm.weight", h);
  plan.bf16("codebook0_head.weight", {cs + 1, h}, 1.5 / std::sqrt(double(h)));
  plan.bf16("tower.input_proj.weight", {ht, h}, 1.0 / std::sqrt(double(h)));
  for (int64_t l = 0; l < c.tower.num_layers; ++l) {
    const std::string p = "tower.layers." + std::to_string(l);
    plan_layer(plan, p, c.tower, c.tower.num_layers);
    plan_dense_mlp(plan, p + ".mlp", ht, c.tower.intermediate_size, c.tower.num_layers);
  }
  plan.norm("tower.norm.weight", ht);
  plan.bf16("tower.heads.weight", {k - 1, cs, ht}, 1.5 / std::sqrt(double(ht)));
}

// Per MoE layer, `n` original ids chosen by a seeded shuffle, sorted.
json choose_kept_experts(const Drama3Config& c, uint64_t seed, int64_t n) {
  json kept = json::array();
  for (int64_t l = 0; l < c.backbone.num_layers; ++l) {
    if (c.is_dense_layer(l)) {
      kept.push_back(nullptr);
      continue;
    }
    const uint64_t key = random_tensor_key(seed, "kept_experts." + std::to_string(l));
    std::vector<std::pair<uint64_t, int64_t>> order;
    for (int64_t e = 0; e < c.moe.num_experts; ++e) order.push_back({mix64(key + uint64_t(e)), e});
    std::sort(order.begin(), order.end());
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(order[i].second);
    std::sort(ids.begin(), ids.end());
    kept.push_back(ids);
  }
  return kept;
}

void write_json(const fs::path& path, const json& j) {
  write_text_file_atomic(path, j.dump(2) + "\n");
}

// Writes the shards (and the index when there is more than one); returns the files written.
std::vector<std::string> write_shards(Plan& plan, const fs::path& dir) {
  const std::vector<PlannedTensor> tensors = plan.sorted_tensors();
  std::vector<ShardTensor> shards;
  for (const auto& t : tensors) shards.push_back({t.name, t.dtype, t.shape});
  return write_checkpoint_shards(
      dir, shards, [&](size_t i) { return plan.take(tensors[i]); }, "make-checkpoint");
}

std::string default_name(const RandomCheckpointOptions& o) {
  std::string name = "random-seed" + std::to_string(o.seed) + (o.nvfp4 ? "-nvfp4" : "-bf16");
  if (o.prune_to) name += "-pruned" + std::to_string(*o.prune_to) + "-" + o.router_layout;
  return name;
}

void write_into(const RandomCheckpointOptions& o, json config_json, const fs::path& dir) {
  Drama3Config cfg = parse_drama3_config(config_json, "--config");
  if (o.prune_to) {
    if (cfg.moe.kept_experts)
      throw UsageError("--prune-to: the config already lists kept_experts (it is pruned)");
    const int64_t n = *o.prune_to;
    if (n < cfg.moe.experts_per_token || n > cfg.moe.num_experts)
      throw UsageError("--prune-to " + std::to_string(n) + " must be in [experts_per_token = " +
                       std::to_string(cfg.moe.experts_per_token) +
                       ", num_experts = " + std::to_string(cfg.moe.num_experts) + "]");
    config_json["backbone"]["moe"]["kept_experts"] = choose_kept_experts(cfg, o.seed, n);
    cfg = parse_drama3_config(config_json, "--config");
  }
  if (o.router_layout != "full" && o.router_layout != "sliced")
    throw UsageError("--router-layout must be \"full\" or \"sliced\" (got \"" + o.router_layout +
                     "\")");
  if (o.router_layout == "sliced" && !cfg.moe.kept_experts)
    throw UsageError("--router-layout sliced needs a pruned checkpoint (--prune-to)");

  // The codec: geometry from config["codec"] (MimiConfig fields), else a small default.
  MimiConfig codec = small_codec_config(cfg.audio.codebook_size, cfg.audio.num_codebooks);
  if (config_json.contains("codec"))
    codec = parse_mimi_config(config_json.at("codec"), "--config: codec");
  if (codec.codebook_size != cfg.audio.codebook_size)
    throw Error("--config: codec.codebook_size must equal audio.codebook_size");
  if (codec.num_quantizers < cfg.audio.num_codebooks)
    throw Error("--config: codec.num_quantizers must be at least audio.num_codebooks");
  if (codec.sampling_rate != cfg.audio.sample_rate ||
      std::fabs(codec.frame_rate() - cfg.audio.frame_rate) > 1e-9)
    throw Error(
        "--config: the codec's sampling_rate and frame rate must match audio.sample_rate and "
        "audio.frame_rate");

  std::vector<std::string> files = {"config.json"};
  write_json(dir / "config.json", config_json);
  if (o.nvfp4) {
    write_json(dir / "hf_quant_config.json",
               json{{"producer", {{"name", "drama make-checkpoint"}, {"version", "1"}}},
                    {"quantization",
                     {{"quant_algo", "NVFP4"},
                      {"group_size", 16},
                      {"kv_cache_quant_algo", nullptr},
                      {"exclude_modules", json::array()}}}});
    files.push_back("hf_quant_config.json");
  }
  Plan plan(o.seed, o.nvfp4);
  plan_model(plan, cfg, o.router_layout == "sliced");
  for (auto& f : write_shards(plan, dir)) files.push_back(f);
  fs::create_directory(dir / "codec");
  write_random_codec(codec, o.seed, dir / "codec");
  files.push_back("codec/config.json");
  files.push_back("codec/model.safetensors");

  // A content-derived revision: same bytes, same revision; nothing here names a real commit.
  write_manifest(dir / "manifest.json",
                 pin_local_checkpoint(dir, files, o.name.empty() ? default_name(o) : o.name,
                                      o.nvfp4 ? "nvfp4" : "bf16", "local/random-checkpoint"));
}

}  // namespace

void write_random_checkpoint(const RandomCheckpointOptions& options, const fs::path& out_dir) {
  if (fs::exists(fs::symlink_status(out_dir)))
    throw UsageError("-o " + out_dir.string() +
                     " already exists (make-checkpoint never overwrites)");
  const fs::path parent = out_dir.has_parent_path() ? out_dir.parent_path() : fs::path(".");
  if (!fs::is_directory(parent))
    throw UsageError("-o " + out_dir.string() + ": the parent directory does not exist");
  write_directory_atomic(out_dir,
                         [&](const fs::path& tmp) { write_into(options, options.config, tmp); });
}

}  // namespace drama

// The validated checkpoint loader (spec sections 2-5): every tensor the config implies is checked
// for presence, dtype and shape, every tensor present must be one of them, and all problems are
// reported together. Weights are exposed as pointers into the mapped shards (zero copy).
#include "format/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "util/error.h"

namespace drama {

namespace {

constexpr size_t kMaxListedProblems = 20;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks tensors against expectations and remembers every name it was asked about.
class TensorChecker {
 public:
  TensorChecker(const TensorSet& tensors, bool quantized)
      : tensors_(tensors), quantized_(quantized) {}

  std::vector<std::string> problems;
  std::set<std::string> expected;

  // A tensor of one dtype and shape; nullptr (and a problem recorded) when it does not match.
  const uint8_t* tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
    expected.insert(name);
    const TensorInfo* info = tensors_.find(name);
    if (!info) {
      problems.push_back("missing tensor " + name);
      return nullptr;
    }
    return check(info, dtype, shape) ? tensors_.view(name).data : nullptr;
  }
  const uint16_t* bf16(const std::string& name, const std::vector<int64_t>& shape) {
    return reinterpret_cast<const uint16_t*>(tensor(name, DType::BF16, shape));
  }
  LinearWeight bf16_linear(const std::string& prefix, int64_t out, int64_t in) {
    LinearWeight w;
    w.format = WeightFormat::BF16;
    w.out = out;
    w.in = in;
    w.data = bf16(prefix + ".weight", {out, in});
    return w;
  }

  // An expert linear: BF16 weight, or an NVFP4 triple (+ optional input_scale), as the files say.
  LinearWeight expert_linear(const std::string& prefix, int64_t out, int64_t in) {
    const std::string weight = prefix + ".weight", scale = prefix + ".weight_scale",
                      scale2 = prefix + ".weight_scale_2", input = prefix + ".input_scale";
    for (const auto& n : {weight, scale, scale2, input}) expected.insert(n);
    LinearWeight w;
    w.out = out;
    w.in = in;
    const TensorInfo* info = tensors_.find(weight);
    if (!info) {
      problems.push_back("missing tensor " + weight);
      return w;
    }
    if (info->dtype == DType::BF16) {
      w.format = WeightFormat::BF16;
      for (const auto& n : {scale, scale2, input})
        if (tensors_.find(n))
          problems.push_back(weight + " is BF16 but " + n +
                             " is present (an NVFP4 triple cannot mix formats)");
      if (check(info, DType::BF16, {out, in})) w.data = tensors_.view(weight).data;
      return w;
    }
    if (info->dtype != DType::U8) {
      problems.push_back(weight + " has dtype " + std::string(dtype_name(info->dtype)) +
                         ", expected BF16 or U8 (NVFP4)");
      return w;
    }
    w.format = WeightFormat::NVFP4;
    if (!quantized_ && !reported_unquantized_) {
      reported_unquantized_ = true;  // once: every expert would repeat it
      problems.push_back(weight + " is NVFP4 but the checkpoint has no hf_quant_config.json");
    }
    if (in % 16 != 0) {
      problems.push_back(weight + " is NVFP4 but its input size " + std::to_string(in) +
                         " is not a multiple of 16");
      return w;
    }
    bool ok = check(info, DType::U8, {out, in / 2});
    const TensorInfo* s = tensors_.find(scale);
    const TensorInfo* s2 = tensors_.find(scale2);
    if (!s) problems.push_back("incomplete NVFP4 triple: missing tensor " + scale);
    if (!s2) problems.push_back("incomplete NVFP4 triple: missing tensor " + scale2);
    ok = ok && s && s2;
    ok = (s && check(s, DType::F8_E4M3, {out, in / 16})) && ok;
    ok = (s2 && check(s2, DType::F32, {})) && ok;
    if (const TensorInfo* is = tensors_.find(input)) ok = check(is, DType::F32, {}) && ok;
    if (!ok) return w;
    float v;
    std::memcpy(&v, tensors_.view(scale2).data, sizeof v);
    if (!(v > 0.0f) || !std::isfinite(v)) {
      problems.push_back(scale2 + " must be positive and finite (got " + std::to_string(v) + ")");
      return w;
    }
    w.data = tensors_.view(weight).data;
    w.scales = tensors_.view(scale).data;
    w.scale2 = v;
    return w;
  }

  bool check(const TensorInfo* info, DType dtype, const std::vector<int64_t>& shape) {
    bool ok = true;
    if (info->dtype != dtype) {
      problems.push_back(info->name + " has dtype " + std::string(dtype_name(info->dtype)) +
                         ", expected " + std::string(dtype_name(dtype)));
      ok = false;
    }
    if (info->shape != shape) {
      problems.push_back(info->name + " has shape " + shape_string(info->shape) + ", expected " +
                         shape_string(shape));
      ok = false;
    }
    return ok;
  }

 private:
  const TensorSet& tensors_;
  bool quantized_;
  bool reported_unquantized_ = false;
};

LayerWeights dense_layer(TensorChecker& c, const std::string& p, const TransformerConfig& t) {
  LayerWeights w;
  const int64_t h = t.hidden_size, q = t.num_heads * t.head_dim, kv = t.num_kv_heads * t.head_dim;
  w.input_norm = c.bf16(p + ".input_norm.weight", {h});
  w.attn.q = c.bf16_linear(p + ".attn.q_proj", q, h);
  w.attn.k = c.bf16_linear(p + ".attn.k_proj", kv, h);
  w.attn.v = c.bf16_linear(p + ".attn.v_proj", kv, h);
  w.attn.o = c.bf16_linear(p + ".attn.o_proj", h, q);
  w.attn.q_norm = c.bf16(p + ".attn.q_norm.weight", {t.head_dim});
  w.attn.k_norm = c.bf16(p + ".attn.k_norm.weight", {t.head_dim});
  w.post_attn_norm = c.bf16(p + ".post_attn_norm.weight", {h});
  return w;
}

void dense_mlp(TensorChecker& c, const std::string& p, int64_t h, int64_t inter, MlpWeights& m) {
  m.gate = c.bf16_linear(p + ".gate_proj", inter, h);
  m.up = c.bf16_linear(p + ".up_proj", inter, h);
  m.down = c.bf16_linear(p + ".down_proj", h, inter);
}

MlpWeights expert_mlp(TensorChecker& c, const std::string& p, int64_t h, int64_t inter) {
  MlpWeights m;
  m.gate = c.expert_linear(p + ".gate_proj", inter, h);
  m.up = c.expert_linear(p + ".up_proj", inter, h);
  m.down = c.expert_linear(p + ".down_proj", h, inter);
  return m;
}

void moe_layer(TensorChecker& c, const Drama3Config& cfg, int64_t l, const std::string& p,
               const TensorSet& tensors, MoeWeights& m) {
  const int64_t h = cfg.backbone.hidden_size;
  const std::vector<int64_t> stored = cfg.stored_experts(l);
  const int64_t n = static_cast<int64_t>(stored.size());
  for (int64_t s = 0; s < n; ++s) {
    m.original_id.push_back(static_cast<int32_t>(stored[s]));
    m.experts.push_back(expert_mlp(c, p + ".mlp.experts." + std::to_string(stored[s]), h,
                                   cfg.moe.expert_intermediate_size));
  }
  // Router layout by row count (spec section 5): all original rows, or the kept rows in order.
  const std::string router = p + ".mlp.router.weight";
  const TensorInfo* info = tensors.find(router);
  int64_t rows = cfg.moe.num_experts;
  if (info && info->shape.size() == 2 && info->shape[0] == n) rows = n;
  if (info && info->shape.size() == 2 && info->shape[0] != cfg.moe.num_experts &&
      info->shape[0] != n) {
    c.expected.insert(router);
    c.problems.push_back(router + " has " + std::to_string(info->shape[0]) +
                         " rows, expected num_experts (" + std::to_string(cfg.moe.num_experts) +
                         ") or the number of stored experts (" + std::to_string(n) + ")");
  } else {
    m.router = c.bf16_linear(p + ".mlp.router", rows, h);
  }
  for (int64_t s = 0; s < n; ++s)
    m.logit_column.push_back(static_cast<int32_t>(rows == cfg.moe.num_experts ? stored[s] : s));
  if (cfg.moe.shared_expert_intermediate_size > 0) {
    m.shared_expert =
        expert_mlp(c, p + ".mlp.shared_expert", h, cfg.moe.shared_expert_intermediate_size);
    m.shared_expert_gate = c.bf16_linear(p + ".mlp.shared_expert_gate", 1, h);
  }
}

// "backbone.layers.3.mlp.experts.17.up_proj.weight" -> why expert 17 of layer 3 is unexpected.
std::string unexpected_hint(const std::string& name, const Drama3Config& cfg) {
  long long layer = -1, id = -1;
  int end = 0;
  if (std::sscanf(name.c_str(), "backbone.layers.%lld.mlp.experts.%lld.%n", &layer, &id, &end) !=
          2 ||
      end == 0 || layer < 0 || layer >= cfg.backbone.num_layers || id < 0)
    return "";
  if (cfg.is_dense_layer(layer)) return " (layer " + std::to_string(layer) + " is dense)";
  if (id >= cfg.moe.num_experts)
    return " (expert " + std::to_string(id) +
           " is beyond num_experts = " + std::to_string(cfg.moe.num_experts) + ")";
  return " (expert " + std::to_string(id) + " is not listed in kept_experts[" +
         std::to_string(layer) + "])";
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& dir, Residency residency)
    : dir_(dir),
      config_(load_drama3_config(dir / "config.json")),
      quant_(load_quant_config(dir)),
      tensors_(dir, residency) {
  const Drama3Config& cfg = config_;
  TensorChecker c(tensors_, quant_.has_value());
  ModelWeights& w = weights_;
  const int64_t h = cfg.backbone.hidden_size, ht = cfg.tower.hidden_size;
  const int64_t k = cfg.audio.num_codebooks, cs = cfg.audio.codebook_size;

  w.text_embed = c.bf16("text_embed.weight", {cfg.text.vocab_size, h});
  w.audio_embed = c.bf16("audio_embed.weight", {k * (cs + 1), h});
  for (int64_t l = 0; l < cfg.backbone.num_layers; ++l) {
    const std::string p = "backbone.layers." + std::to_string(l);
    LayerWeights layer = dense_layer(c, p, cfg.backbone);
    layer.dense = cfg.is_dense_layer(l);
    if (layer.dense)
      dense_mlp(c, p + ".mlp", h, cfg.backbone.intermediate_size, layer.mlp);
    else
      moe_layer(c, cfg, l, p, tensors_, layer.moe);
    w.backbone.push_back(std::move(layer));
  }
  w.backbone_norm = c.bf16("backbone.norm.weight", {h});
  w.codebook0_head = c.bf16_linear("codebook0_head", cs + 1, h);
  w.tower_input_proj = c.bf16_linear("tower.input_proj", ht, h);
  for (int64_t l = 0; l < cfg.tower.num_layers; ++l) {
    const std::string p = "tower.layers." + std::to_string(l);
    LayerWeights layer = dense_layer(c, p, cfg.tower);
    dense_mlp(c, p + ".mlp", ht, cfg.tower.intermediate_size, layer.mlp);
    w.tower.push_back(std::move(layer));
  }
  w.tower_norm = c.bf16("tower.norm.weight", {ht});
  if (const uint16_t* heads = c.bf16("tower.heads.weight", {k - 1, cs, ht})) {
    for (int64_t i = 0; i + 1 < k; ++i) {
      LinearWeight head;
      head.out = cs;
      head.in = ht;
      head.data = heads + i * cs * ht;
      w.tower_heads.push_back(head);
    }
  }

  for (const std::string& name : tensors_.names())
    if (!c.expected.count(name))
      c.problems.push_back("unexpected tensor " + name + unexpected_hint(name, cfg));

  if (!c.problems.empty()) {
    std::string msg = "checkpoint " + dir.string() +
                      " refused: " + std::to_string(c.problems.size()) + " problem" +
                      (c.problems.size() == 1 ? "" : "s") + ": ";
    for (size_t i = 0; i < c.problems.size() && i < kMaxListedProblems; ++i)
      msg += (i ? "; " : "") + c.problems[i];
    if (c.problems.size() > kMaxListedProblems)
      msg += "; and " + std::to_string(c.problems.size() - kMaxListedProblems) + " more";
    throw Error(msg);
  }
}

}  // namespace drama

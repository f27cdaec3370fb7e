// `drama quantize` (spec sections 4 and 5). The input is loaded through the validating Checkpoint
// first, so only a well-formed BF16 checkpoint is ever rewritten. Expert projections (routed and
// shared) become NVFP4 triples by nvfp4_quantize; gate and up of one expert share the larger of
// their two tensor scales, as ModelOpt writes a fused gate_up projection. The reference quantizer
// (tools/reference/nvfp4.py) gives the same bytes; tests/format/test_quantize.cpp checks it.
#include "format/quantize_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <regex>
#include <set>

#include "format/builtin_voices.h"
#include "format/checkpoint.h"
#include "format/manifest.h"
#include "format/nvfp4.h"
#include "format/safetensors.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "backbone.layers.3.mlp.experts.17.gate_proj" -> layer 3, expert 17, part "gate_proj";
// shared experts have expert -1.
struct ExpertLinear {
  int64_t layer = -1, expert = -1;
  std::string part;    // gate_proj | up_proj | down_proj
  std::string prefix;  // the name without ".weight"
};

std::optional<ExpertLinear> parse_expert_weight(const std::string& name) {
  static const std::regex routed(
      R"(backbone\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight)");
  static const std::regex shared(
      R"(backbone\.layers\.(\d+)\.mlp\.shared_expert\.(gate_proj|up_proj|down_proj)\.weight)");
  std::smatch m;
  ExpertLinear e;
  if (std::regex_match(name, m, routed)) {
    e.layer = std::stoll(m[1]);
    e.expert = std::stoll(m[2]);
    e.part = m[3];
  } else if (std::regex_match(name, m, shared)) {
    e.layer = std::stoll(m[1]);
    e.part = m[2];
  } else {
    return std::nullopt;
  }
  e.prefix = name.substr(0, name.size() - std::string(".weight").size());
  return e;
}

std::string sibling(const ExpertLinear& e, const std::string& part) {
  return e.prefix.substr(0, e.prefix.size() - e.part.size()) + part;
}

std::vector<float> read_float_matrix(const TensorSet& t, const std::string& name) {
  const TensorView v = t.view(name);
  std::vector<float> out(static_cast<size_t>(v.info->numel()));
  if (v.info->dtype == DType::BF16) {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, v.data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
  } else if (v.info->dtype == DType::F32) {
    std::memcpy(out.data(), v.data, out.size() * 4);
  } else {
    throw Error(t.root().string() + ": tensor " + name + " has dtype " +
                std::string(dtype_name(v.info->dtype)) + " (quantize reads BF16 or F32)");
  }
  return out;
}

struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes() const {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

// Produces the output tensors' bytes; a quantized linear's triple is made once and handed out
// tensor by tensor.
class OutputTensors {
 public:
  OutputTensors(const TensorSet& in, const Drama3Config& in_config,
                const std::vector<std::vector<int64_t>>& kept, bool sliced_router)
      : in_(in), in_config_(in_config), kept_(kept), sliced_router_(sliced_router) {
    for (const std::string& name : in.names()) plan(name);
    std::sort(out_.begin(), out_.end(),
              [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });
  }
  const std::vector<OutTensor>& tensors() const { return out_; }

  std::vector<uint8_t> take(const OutTensor& t) {
    auto q = quantized_.find(t.name);
    if (q != quantized_.end()) {
      const std::string prefix = q->second;
      auto& triple = made_[prefix];
      if (triple.empty()) triple = quantize(prefix);
      auto node = triple.extract(t.name);
      if (triple.empty()) made_.erase(prefix);
      return std::move(node.mapped());
    }
    auto r = router_rows_.find(t.name);
    const TensorView v = in_.view(t.name);
    if (r == router_rows_.end()) return {v.data, v.data + v.bytes()};
    const uint64_t row = v.bytes() / static_cast<uint64_t>(v.info->shape[0]);
    std::vector<uint8_t> out;
    for (int64_t i : r->second) out.insert(out.end(), v.data + i * row, v.data + (i + 1) * row);
    return out;
  }

 private:
  void plan(const std::string& name) {
    const TensorInfo* info = in_.find(name);
    if (const auto e = parse_expert_weight(name)) {
      if (e->expert >= 0 &&
          !std::binary_search(kept_[e->layer].begin(), kept_[e->layer].end(), e->expert))
        return;  // pruned away
      const int64_t out = info->shape[0], in = info->shape[1];
      out_.push_back({name, DType::U8, {out, in / 2}});
      out_.push_back({e->prefix + ".weight_scale", DType::F8_E4M3, {out, in / kNvfp4Block}});
      out_.push_back({e->prefix + ".weight_scale_2", DType::F32, {}});
      for (const char* s : {".weight", ".weight_scale", ".weight_scale_2"})
        quantized_[e->prefix + s] = e->prefix;
      return;
    }
    static const std::regex router(R"(backbone\.layers\.(\d+)\.mlp\.router\.weight)");
    std::smatch m;
    if (std::regex_match(name, m, router)) {
      const int64_t layer = std::stoll(m[1]);
      const std::vector<int64_t> stored = in_config_.stored_experts(layer);
      const bool in_full = info->shape[0] == in_config_.moe.num_experts;
      if (sliced_router_) {
        // Rows in kept order, taken from the input's rows (all experts, or its own kept order).
        std::vector<int64_t> rows;
        for (int64_t e : kept_[layer])
          rows.push_back(
              in_full ? e : std::lower_bound(stored.begin(), stored.end(), e) - stored.begin());
        bool identity = static_cast<int64_t>(rows.size()) == info->shape[0];
        for (size_t i = 0; identity && i < rows.size(); ++i)
          identity = rows[i] == static_cast<int64_t>(i);
        if (!identity) {
          out_.push_back({name, info->dtype, {static_cast<int64_t>(rows.size()), info->shape[1]}});
          router_rows_[name] = std::move(rows);
          return;
        }
      }
    }
    out_.push_back({name, info->dtype, info->shape});
  }

  std::map<std::string, std::vector<uint8_t>> quantize(const std::string& prefix) {
    const auto e = *parse_expert_weight(prefix + ".weight");
    const TensorInfo* info = in_.find(prefix + ".weight");
    const std::vector<float> w = read_float_matrix(in_, prefix + ".weight");
    std::optional<float> scale2;
    if (e.part != "down_proj") {
      const std::string other = sibling(e, e.part == "gate_proj" ? "up_proj" : "gate_proj");
      if (in_.find(other + ".weight"))
        scale2 = std::max(nvfp4_tensor_scale(w),
                          nvfp4_tensor_scale(read_float_matrix(in_, other + ".weight")));
    }
    Nvfp4Matrix q;
    try {
      q = nvfp4_quantize(w, info->shape[0], info->shape[1], scale2);
    } catch (const Error& err) {
      throw Error(in_.root().string() + ": tensor " + prefix + ".weight: " + err.what());
    }
    std::vector<uint8_t> s2(4);
    std::memcpy(s2.data(), &q.scale2, 4);
    return {{prefix + ".weight", std::move(q.codes)},
            {prefix + ".weight_scale", std::move(q.scales)},
            {prefix + ".weight_scale_2", std::move(s2)}};
  }

  const TensorSet& in_;
  const Drama3Config& in_config_;
  const std::vector<std::vector<int64_t>>& kept_;
  bool sliced_router_;
  std::vector<OutTensor> out_;
  std::map<std::string, std::string> quantized_;             // output name -> linear prefix
  std::map<std::string, std::vector<int64_t>> router_rows_;  // sliced routers: input rows
  std::map<std::string, std::map<std::string, std::vector<uint8_t>>> made_;
};

// Shards by running byte count (as make-checkpoint does); returns the files written.
std::vector<std::string> write_shards(OutputTensors& tensors, const fs::path& dir) {
  const std::vector<OutTensor>& all = tensors.tensors();
  std::vector<ShardTensor> plan;
  for (const auto& t : all) plan.push_back({t.name, t.dtype, t.shape});
  return write_checkpoint_shards(
      dir, plan, [&](size_t i) { return tensors.take(all[i]); }, "quantize");
}

void copy_file_bytes(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, ec);
  if (ec) throw Error("cannot copy " + from.string() + " to " + to.string() + ": " + ec.message());
}

void write_into(const fs::path& in_dir, const QuantizeOptions& o, const fs::path& dir) {
  const Checkpoint in(in_dir);  // validates every tensor against the config
  const Drama3Config& c = in.config();
  std::vector<std::vector<int64_t>> kept(c.backbone.num_layers);
  for (int64_t l = 0; l < c.backbone.num_layers; ++l) kept[l] = c.stored_experts(l);
  bool pruned = c.moe.kept_experts.has_value();
  if (o.keep_experts) {
    kept = *o.keep_experts;
    for (int64_t l = 0; l < c.backbone.num_layers; ++l)
      if (kept[l] != c.stored_experts(l)) pruned = true;
  }
  bool in_sliced = false;
  for (int64_t l = 0; l < c.backbone.num_layers; ++l)
    if (!c.is_dense_layer(l) && in.weights().backbone[l].moe.router.out != c.moe.num_experts)
      in_sliced = true;
  if (o.router_layout == "full" && in_sliced)
    throw UsageError("--router-layout full: " + in_dir.string() +
                     " stores sliced routers; the removed experts' rows are gone");
  const bool sliced = o.router_layout.empty() ? in_sliced : o.router_layout == "sliced";

  json config = c.raw;
  if (pruned) {
    json list = json::array();
    for (int64_t l = 0; l < c.backbone.num_layers; ++l)
      list.push_back(c.is_dense_layer(l) ? json(nullptr) : json(kept[l]));
    config["backbone"]["moe"]["kept_experts"] = list;
  }
  parse_drama3_config(config, "the quantized config.json");  // our own invariant

  std::vector<std::string> files = {"config.json", "hf_quant_config.json"};
  write_text_file_atomic(dir / "config.json", config.dump(2) + "\n");
  write_text_file_atomic(dir / "hf_quant_config.json",
                         json{{"producer", {{"name", "drama quantize"}, {"version", "1"}}},
                              {"quantization",
                               {{"quant_algo", "NVFP4"},
                                {"group_size", 16},
                                {"kv_cache_quant_algo", nullptr},
                                {"exclude_modules", json::array()}}}}
                                 .dump(2) +
                             "\n");
  OutputTensors tensors(in.tensors(), c, kept, sliced);
  for (auto& f : write_shards(tensors, dir)) files.push_back(f);
  if (fs::exists(in_dir / "codec")) {
    fs::create_directory(dir / "codec");
    for (const char* f : {"codec/config.json", "codec/model.safetensors"}) {
      copy_file_bytes(in_dir / f, dir / f);
      files.push_back(f);
    }
  }
  // Built-in voices were encoded with the codec, which is copied unchanged: they stay valid and
  // are copied byte for byte (checked by load_builtin_voices once the manifest is written).
  if (fs::exists(in_dir / kBuiltinVoicesDir)) {
    fs::create_directory(dir / kBuiltinVoicesDir);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(in_dir / kBuiltinVoicesDir))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const std::string f = std::string(kBuiltinVoicesDir) + "/" + n;
      copy_file_bytes(in_dir / f, dir / f);
      files.push_back(f);
    }
  }

  std::string name = o.name;
  if (name.empty()) {
    name = fs::absolute(in_dir).lexically_normal().filename().string();
    if (name.empty()) name = fs::absolute(in_dir).lexically_normal().parent_path().filename();
    name += pruned ? "-nvfp4-pruned" : "-nvfp4";
  }
  // A content-derived revision (as make-checkpoint's): same bytes, same revision.
  write_manifest(dir / "manifest.json",
                 pin_local_checkpoint(dir, files, name, "nvfp4", "local/quantize"));
}

}  // namespace

std::vector<std::vector<int64_t>> parse_keep_experts(const json& j, const Drama3Config& input,
                                                     const std::string& label) {
  const json* list = &j;
  if (j.is_object()) {
    if (!j.contains("kept_experts") || j.size() != 1)
      throw UsageError(label + ": an object must hold exactly one key, \"kept_experts\"");
    list = &j.at("kept_experts");
  }
  if (!list->is_array() || static_cast<int64_t>(list->size()) != input.backbone.num_layers)
    throw UsageError(label + ": expected a list of " + std::to_string(input.backbone.num_layers) +
                     " entries, one per backbone layer (null for dense layers)");
  std::vector<std::vector<int64_t>> kept(input.backbone.num_layers);
  for (int64_t l = 0; l < input.backbone.num_layers; ++l) {
    const json& entry = (*list)[l];
    const std::string where = label + ": layer " + std::to_string(l);
    if (input.is_dense_layer(l)) {
      if (!entry.is_null() && !(entry.is_array() && entry.empty()))
        throw UsageError(where + " is a dense layer and must be null");
      continue;
    }
    if (!entry.is_array() || entry.empty())
      throw UsageError(where + " is a MoE layer and needs a non-empty list of expert ids");
    const std::vector<int64_t> stored = input.stored_experts(l);
    std::set<int64_t> ids;
    for (const json& id : entry) {
      if (!id.is_number_integer()) throw UsageError(where + ": expert ids must be integers");
      const int64_t e = id.get<int64_t>();
      if (!std::binary_search(stored.begin(), stored.end(), e))
        throw UsageError(where + ": expert " + std::to_string(e) +
                         " is not stored in the input checkpoint");
      if (!ids.insert(e).second)
        throw UsageError(where + ": expert " + std::to_string(e) + " is listed twice");
    }
    kept[l].assign(ids.begin(), ids.end());
  }
  return kept;
}

void quantize_checkpoint(const fs::path& in_dir, const fs::path& out_dir,
                         const QuantizeOptions& options) {
  if (load_quant_config(in_dir))
    throw Error(in_dir.string() + " is already quantized (it has hf_quant_config.json)");
  if (fs::exists(fs::symlink_status(out_dir)))
    throw UsageError("OUT_DIR " + out_dir.string() + " already exists (quantize never overwrites)");
  const fs::path parent = out_dir.has_parent_path() ? out_dir.parent_path() : fs::path(".");
  if (!fs::is_directory(parent))
    throw UsageError("OUT_DIR " + out_dir.string() + ": the parent directory does not exist");
  write_directory_atomic(out_dir, [&](const fs::path& tmp) {
    write_into(in_dir, options, tmp);
    Checkpoint check(tmp);  // what we wrote loads (our own invariant, cheap next to quantizing)
    load_builtin_voices(tmp, load_manifest(tmp / "manifest.json"));
  });
}

}  // namespace drama

// Loading a Mimi codec: Hugging Face MimiModel tensor names (float32), module order as in HF's
// MimiEncoder / MimiDecoder constructors.
#include <algorithm>
#include <cstring>
#include <set>

#include "codec/mimi.h"
#include "format/safetensors.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class WeightLoader {
 public:
  WeightLoader(const TensorSet& set, Backend& backend, std::string file,
               std::vector<std::vector<float>>& aligned)
      : set_(set), backend_(backend), file_(std::move(file)), aligned_(aligned) {}

  // The tensor made resident on the backend (float loads need 4-byte alignment: an unaligned
  // tensor is copied first).
  const float* tensor(const std::string& name, const std::vector<int64_t>& shape) {
    TensorView v = check(name, shape);
    const void* src = v.data;
    if (reinterpret_cast<uintptr_t>(src) % alignof(float) != 0) {
      aligned_.emplace_back(v.bytes() / sizeof(float));
      std::memcpy(aligned_.back().data(), v.data, v.bytes());
      src = aligned_.back().data();
    }
    return static_cast<const float*>(backend_.resident_bytes(src, v.bytes()));
  }

  // A [out, in] (or [out, in, 1]) weight made resident transposed, [in, out], as
  // CodecOps::linear_f32 takes it.
  const float* transposed(const std::string& name, const std::vector<int64_t>& shape) {
    TensorView v = check(name, shape);
    const int64_t out = shape[0], in = shape[1];
    std::vector<float> w(static_cast<size_t>(out * in));
    std::memcpy(w.data(), v.data, v.bytes());
    aligned_.emplace_back(w.size());
    std::vector<float>& t = aligned_.back();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) t[i * out + o] = w[o * in + i];
    return static_cast<const float*>(backend_.resident_bytes(t.data(), t.size() * sizeof(float)));
  }

  // Host float32 view of a tensor (for codebooks, computed on the host before upload).
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) {
    TensorView v = check(name, shape);
    std::vector<float> out(v.bytes() / sizeof(float));
    std::memcpy(out.data(), v.data, v.bytes());
    return out;
  }

  void refuse_unexpected() const {
    for (const std::string& name : set_.names())
      if (!used_.count(name))
        throw Error(file_ + ": unexpected tensor '" + name + "' for this Mimi config.");
  }

 private:
  TensorView check(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* info = set_.find(name);
    if (!info) throw Error(file_ + ": missing tensor '" + name + "'.");
    if (info->dtype != DType::F32)
      throw Error(file_ + ": tensor '" + name + "' must be F32, not " +
                  std::string(dtype_name(info->dtype)) + ".");
    if (info->shape != shape)
      throw Error(file_ + ": tensor '" + name + "' has shape " + shape_str(info->shape) +
                  ", expected " + shape_str(shape) + ".");
    used_.insert(name);
    return set_.view(name);
  }

  const TensorSet& set_;
  Backend& backend_;
  std::string file_;
  std::vector<std::vector<float>>& aligned_;
  std::set<std::string> used_;
};

ConvWeights load_conv(WeightLoader& L, const std::string& prefix, int64_t in, int64_t out,
                      int64_t kernel, int64_t stride, int64_t dilation, bool bias) {
  ConvWeights c;
  c.in = in;
  c.out = out;
  c.kernel = kernel;
  c.stride = stride;
  c.dilation = dilation;
  c.weight = L.tensor(prefix + ".conv.weight", {out, in, kernel});
  if (bias) c.bias = L.tensor(prefix + ".conv.bias", {out});
  return c;
}

ConvWeights load_conv_transpose(WeightLoader& L, const std::string& prefix, int64_t in, int64_t out,
                                int64_t kernel, int64_t stride, int64_t groups, bool bias) {
  ConvWeights c;
  c.in = in;
  c.out = out;
  c.kernel = kernel;
  c.stride = stride;
  c.groups = groups;
  c.weight = L.tensor(prefix + ".conv.weight", {in, out / groups, kernel});
  if (bias) c.bias = L.tensor(prefix + ".conv.bias", {out});
  return c;
}

SeanetLayer resnet(WeightLoader& L, const MimiConfig& c, const std::string& prefix, int64_t dim,
                   int64_t dilation) {
  SeanetLayer l;
  l.kind = SeanetLayer::Kind::Resnet;
  const int64_t hidden = dim / c.compress;
  l.block1 =
      load_conv(L, prefix + ".block.1", dim, hidden, c.residual_kernel_size, 1, dilation, true);
  l.block3 = load_conv(L, prefix + ".block.3", hidden, dim, 1, 1, 1, true);
  return l;
}

SeanetLayer conv_layer(ConvWeights w, SeanetLayer::Kind kind = SeanetLayer::Kind::Conv) {
  SeanetLayer l;
  l.kind = kind;
  l.conv = w;
  return l;
}

SeanetLayer elu_layer() {
  return SeanetLayer{};
}

int64_t ipow(int64_t b, int64_t e) {
  int64_t r = 1;
  while (e-- > 0) r *= b;
  return r;
}

std::vector<SeanetLayer> load_encoder(WeightLoader& L, const MimiConfig& c) {
  std::vector<SeanetLayer> layers;
  auto name = [&] { return "encoder.layers." + std::to_string(layers.size()); };
  layers.push_back(conv_layer(load_conv(L, name(), 1, c.num_filters, c.kernel_size, 1, 1, true)));
  int64_t scaling = 1;
  for (auto it = c.upsampling_ratios.rbegin(); it != c.upsampling_ratios.rend(); ++it) {
    const int64_t cur = scaling * c.num_filters;
    for (int64_t j = 0; j < c.num_residual_layers; ++j)
      layers.push_back(resnet(L, c, name(), cur, ipow(c.dilation_growth_rate, j)));
    layers.push_back(elu_layer());
    layers.push_back(conv_layer(load_conv(L, name(), cur, 2 * cur, 2 * *it, *it, 1, true)));
    scaling *= 2;
  }
  layers.push_back(elu_layer());
  layers.push_back(conv_layer(load_conv(L, name(), scaling * c.num_filters, c.hidden_size,
                                        c.last_kernel_size, 1, 1, true)));
  return layers;
}

std::vector<SeanetLayer> load_decoder(WeightLoader& L, const MimiConfig& c) {
  std::vector<SeanetLayer> layers;
  auto name = [&] { return "decoder.layers." + std::to_string(layers.size()); };
  int64_t scaling = ipow(2, static_cast<int64_t>(c.upsampling_ratios.size()));
  layers.push_back(conv_layer(
      load_conv(L, name(), c.hidden_size, scaling * c.num_filters, c.kernel_size, 1, 1, true)));
  for (int64_t ratio : c.upsampling_ratios) {
    const int64_t cur = scaling * c.num_filters;
    layers.push_back(elu_layer());
    layers.push_back(
        conv_layer(load_conv_transpose(L, name(), cur, cur / 2, 2 * ratio, ratio, 1, true),
                   SeanetLayer::Kind::ConvTranspose));
    for (int64_t j = 0; j < c.num_residual_layers; ++j)
      layers.push_back(resnet(L, c, name(), cur / 2, ipow(c.dilation_growth_rate, j)));
    scaling /= 2;
  }
  layers.push_back(elu_layer());
  layers.push_back(
      conv_layer(load_conv(L, name(), c.num_filters, 1, c.last_kernel_size, 1, 1, true)));
  return layers;
}

std::vector<TransformerLayerWeights> load_transformer(WeightLoader& L, const MimiConfig& c,
                                                      const std::string& prefix) {
  std::vector<TransformerLayerWeights> layers;
  const int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = prefix + ".layers." + std::to_string(l) + ".";
    TransformerLayerWeights w;
    w.q = L.transposed(p + "self_attn.q_proj.weight", {q, d});
    w.k = L.transposed(p + "self_attn.k_proj.weight", {kv, d});
    w.v = L.transposed(p + "self_attn.v_proj.weight", {kv, d});
    w.o = L.transposed(p + "self_attn.o_proj.weight", {d, q});
    w.fc1 = L.transposed(p + "mlp.fc1.weight", {inter, d});
    w.fc2 = L.transposed(p + "mlp.fc2.weight", {d, inter});
    w.input_norm_w = L.tensor(p + "input_layernorm.weight", {d});
    w.input_norm_b = L.tensor(p + "input_layernorm.bias", {d});
    w.post_norm_w = L.tensor(p + "post_attention_layernorm.weight", {d});
    w.post_norm_b = L.tensor(p + "post_attention_layernorm.bias", {d});
    w.attn_scale = L.tensor(p + "self_attn_layer_scale.scale", {d});
    w.mlp_scale = L.tensor(p + "mlp_layer_scale.scale", {d});
    layers.push_back(w);
  }
  return layers;
}

// What this engine implements beyond what MimiConfig accepts (streaming needs causal convs).
void check_supported(const MimiConfig& c, const std::string& label) {
  auto require = [&](bool ok, const char* what) {
    if (!ok) throw Error(label + ": " + what + " (this engine's Mimi codec needs it).");
  };
  require(c.use_causal_conv, "use_causal_conv must be true");
  require(c.pad_mode == "constant", "pad_mode must be \"constant\"");
  require(c.trim_right_ratio == 1.0, "trim_right_ratio must be 1.0");
  require(!c.use_conv_shortcut, "use_conv_shortcut must be false");
  require(!c.attention_bias, "attention_bias must be false");
  require(c.audio_channels == 1, "audio_channels must be 1");
  require(c.sliding_window > 0, "sliding_window must be positive");
  require(c.num_semantic_quantizers >= 1, "num_semantic_quantizers must be at least 1");
  require(c.compress >= 1 && c.num_filters % c.compress == 0,
          "num_filters must be a multiple of compress");
}

}  // namespace

MimiModel::MimiModel(const std::filesystem::path& dir, Backend& backend)
    : dir_(dir), backend_(backend) {
  config_ = load_mimi_config(dir / "config.json");
  check_supported(config_, (dir / "config.json").string());
  const std::filesystem::path file = dir / "model.safetensors";
  tensors_ = std::make_unique<TensorSet>(TensorSet::single(file));
  WeightLoader L(*tensors_, backend, file.string(), host_codebooks_);
  const MimiConfig& c = config_;
  weights_.encoder = load_encoder(L, c);
  weights_.encoder_transformer = load_transformer(L, c, "encoder_transformer");
  weights_.decoder_transformer = load_transformer(L, c, "decoder_transformer");
  weights_.decoder = load_decoder(L, c);
  const int64_t k = c.resample_kernel();
  weights_.downsample = load_conv(L, "downsample", c.hidden_size, c.hidden_size, k, 2, 1, false);
  weights_.downsample.replicate = true;  // HF builds it with pad_mode="replicate"
  weights_.upsample = load_conv_transpose(L, "upsample", c.hidden_size, c.hidden_size, k, 2,
                                          c.upsample_groups, false);
  const int64_t vq = c.vector_quantization_hidden_dimension;
  auto load_rvq = [&](const std::string& prefix, int64_t count, RvqWeights& rvq) {
    if (vq != c.hidden_size) {
      rvq.input_proj = L.transposed(prefix + ".input_proj.weight", {vq, c.hidden_size, 1});
      rvq.output_proj = L.transposed(prefix + ".output_proj.weight", {c.hidden_size, vq, 1});
    }
    for (int64_t i = 0; i < count; ++i) {
      const std::string p = prefix + ".layers." + std::to_string(i) + ".codebook.";
      std::vector<float> sum = L.read(p + "embed_sum", {c.codebook_size, c.codebook_dim});
      std::vector<float> usage = L.read(p + "cluster_usage", {c.codebook_size});
      if (tensors_->find(p + "initialized")) L.read(p + "initialized", {1});
      // HF MimiEuclideanCodebook.embed: embed_sum / cluster_usage.clamp(min=1e-5), in float32.
      for (int64_t r = 0; r < c.codebook_size; ++r) {
        const float u = std::max(usage[r], 1e-5f);
        for (int64_t j = 0; j < c.codebook_dim; ++j) sum[r * c.codebook_dim + j] /= u;
      }
      host_codebooks_.push_back(std::move(sum));
      const std::vector<float>& e = host_codebooks_.back();
      rvq.codebooks.push_back(
          static_cast<const float*>(backend.resident_bytes(e.data(), e.size() * sizeof(float))));
    }
  };
  load_rvq("quantizer.semantic_residual_vector_quantizer", c.num_semantic_quantizers,
           weights_.semantic);
  load_rvq("quantizer.acoustic_residual_vector_quantizer",
           c.num_quantizers - c.num_semantic_quantizers, weights_.acoustic);
  L.refuse_unexpected();
}

MimiModel::~MimiModel() = default;

const std::string& MimiModel::codec_sha256() const {
  std::call_once(sha_once_, [this] { sha256_ = sha256_file(dir_ / "model.safetensors"); });
  return sha256_;
}

void check_mimi_codes(const MimiModel& model, std::span<const int32_t> codes, int64_t frames,
                      int64_t num_codebooks, const std::string& label) {
  if (num_codebooks < 1 || num_codebooks > model.num_quantizers())
    throw Error(label + ": " + std::to_string(num_codebooks) + " codebooks, but the codec has 1.." +
                std::to_string(model.num_quantizers()) + ".");
  if (frames < 0 || static_cast<int64_t>(codes.size()) != frames * num_codebooks)
    throw Error(label + ": codes do not hold " + std::to_string(frames) + " frames of " +
                std::to_string(num_codebooks) + " codebooks.");
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t k = 0; k < num_codebooks; ++k) {
      const int32_t v = codes[f * num_codebooks + k];
      if (v < 0 || v >= model.codebook_size())
        throw Error(label + ": code " + std::to_string(v) + " at frame " + std::to_string(f) +
                    ", codebook " + std::to_string(k) + " is outside 0.." +
                    std::to_string(model.codebook_size() - 1) + ".");
    }
}

}  // namespace drama

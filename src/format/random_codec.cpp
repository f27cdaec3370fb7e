// A random Mimi codec (codec/ of a random checkpoint): every tensor of Hugging Face MimiModel for
// the given MimiConfig, float32, with scales that keep signals in range (docs/checkpoints.md).
#include <cmath>
#include <string>
#include <vector>

#include "format/random_checkpoint.h"
#include "format/safetensors.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace {

class CodecBuilder {
 public:
  CodecBuilder(const MimiConfig& c, uint64_t seed) : c_(c), seed_(seed) {}

  // Gaussian-like values of standard deviation `std` around `mean`.
  void normal(const std::string& name, std::vector<int64_t> shape, double std, double mean = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    const uint64_t key = random_tensor_key(seed_, name);
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<float>(mean + std * random_unit_normal(key, static_cast<uint64_t>(i)));
    writer_.add_typed<float>(name, DType::F32, std::move(shape), v);
  }
  void constant(const std::string& name, std::vector<int64_t> shape, float value) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n), value);
    writer_.add_typed<float>(name, DType::F32, std::move(shape), v);
  }
  // MimiConv1d: weight [out, in/groups, k] with fan-in scaling, small random bias.
  void conv(const std::string& p, int64_t in, int64_t out, int64_t k, bool bias = true,
            double gain = 1.0) {
    normal(p + ".conv.weight", {out, in, k}, gain / std::sqrt(static_cast<double>(in * k)));
    if (bias) normal(p + ".conv.bias", {out}, 0.02);
  }
  // MimiConvTranspose1d: weight [in, out/groups, k]; each output sums in/groups * k/stride taps.
  void conv_transpose(const std::string& p, int64_t in, int64_t out, int64_t k, int64_t stride,
                      int64_t groups, bool bias = true) {
    const double taps = static_cast<double>(in / groups) * static_cast<double>(k) / stride;
    normal(p + ".conv.weight", {in, out / groups, k}, 1.0 / std::sqrt(taps));
    if (bias) normal(p + ".conv.bias", {out}, 0.02);
  }
  void resnet_block(const std::string& p, int64_t dim) {
    const int64_t hidden = dim / c_.compress;
    conv(p + ".block.1", dim, hidden, c_.residual_kernel_size);
    conv(p + ".block.3", hidden, dim, 1, true, 0.5);  // residual branch kept smaller than the skip
    if (c_.use_conv_shortcut) conv(p + ".shortcut", dim, dim, 1);
  }
  void linear(const std::string& name, int64_t out, int64_t in, bool bias) {
    normal(name + ".weight", {out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
    if (bias) normal(name + ".bias", {out}, 0.02);
  }
  void transformer(const std::string& p) {
    const int64_t h = c_.hidden_size, q = c_.num_attention_heads * c_.head_dim,
                  kv = c_.num_key_value_heads * c_.head_dim;
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string lp = p + ".layers." + std::to_string(l);
      linear(lp + ".self_attn.q_proj", q, h, c_.attention_bias);
      linear(lp + ".self_attn.k_proj", kv, h, c_.attention_bias);
      linear(lp + ".self_attn.v_proj", kv, h, c_.attention_bias);
      linear(lp + ".self_attn.o_proj", h, q, c_.attention_bias);
      linear(lp + ".mlp.fc1", c_.intermediate_size, h, false);
      linear(lp + ".mlp.fc2", h, c_.intermediate_size, false);
      normal(lp + ".input_layernorm.weight", {h}, 0.05, 1.0);
      normal(lp + ".input_layernorm.bias", {h}, 0.02);
      normal(lp + ".post_attention_layernorm.weight", {h}, 0.05, 1.0);
      normal(lp + ".post_attention_layernorm.bias", {h}, 0.02);
      constant(lp + ".self_attn_layer_scale.scale", {h},
               static_cast<float>(c_.layer_scale_initial_scale));
      constant(lp + ".mlp_layer_scale.scale", {h},
               static_cast<float>(c_.layer_scale_initial_scale));
    }
  }
  void quantizer(const std::string& p, int64_t layers) {
    const int64_t dim = c_.vector_quantization_hidden_dimension;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string cb = p + ".layers." + std::to_string(i) + ".codebook";
      constant(cb + ".initialized", {1}, 1.0f);
      constant(cb + ".cluster_usage", {c_.codebook_size}, 1.0f);  // codebook = embed_sum
      normal(cb + ".embed_sum", {c_.codebook_size, c_.codebook_dim}, 1.0);
    }
    if (c_.has_quantizer_projections()) {
      normal(p + ".input_proj.weight", {dim, c_.hidden_size, 1},
             1.0 / std::sqrt(static_cast<double>(c_.hidden_size)));
      // The decoded sum of `layers` unit codebook vectors is scaled back to about unit size.
      normal(p + ".output_proj.weight", {c_.hidden_size, dim, 1},
             1.0 / std::sqrt(static_cast<double>(dim * std::max<int64_t>(layers, 1))));
    }
  }

  void build() {
    // SEANet encoder (HF MimiEncoder layer numbering: ELUs take indices too).
    int64_t idx = 0, scale = 1;
    conv("encoder.layers." + std::to_string(idx++), c_.audio_channels, c_.num_filters,
         c_.kernel_size);
    for (auto it = c_.upsampling_ratios.rbegin(); it != c_.upsampling_ratios.rend(); ++it) {
      const int64_t dim = scale * c_.num_filters;
      for (int64_t j = 0; j < c_.num_residual_layers; ++j)
        resnet_block("encoder.layers." + std::to_string(idx++), dim);
      ++idx;  // ELU
      conv("encoder.layers." + std::to_string(idx++), dim, dim * 2, *it * 2);
      scale *= 2;
    }
    ++idx;  // ELU
    conv("encoder.layers." + std::to_string(idx), scale * c_.num_filters, c_.hidden_size,
         c_.last_kernel_size);
    transformer("encoder_transformer");
    const int64_t h = c_.hidden_size, k = c_.resample_kernel();
    conv("downsample", h, h, k, false);
    conv_transpose("upsample", h, h, k, 2, c_.upsample_groups, false);
    transformer("decoder_transformer");
    // SEANet decoder.
    idx = 0;
    scale = int64_t{1} << c_.upsampling_ratios.size();
    conv("decoder.layers." + std::to_string(idx++), h, scale * c_.num_filters, c_.kernel_size);
    for (int64_t ratio : c_.upsampling_ratios) {
      const int64_t dim = scale * c_.num_filters;
      ++idx;  // ELU
      conv_transpose("decoder.layers." + std::to_string(idx++), dim, dim / 2, ratio * 2, ratio, 1);
      for (int64_t j = 0; j < c_.num_residual_layers; ++j)
        resnet_block("decoder.layers." + std::to_string(idx++), dim / 2);
      scale /= 2;
    }
    ++idx;  // ELU
    // The last conv is kept small so random speech-like output stays well inside [-1, 1].
    conv("decoder.layers." + std::to_string(idx), c_.num_filters, c_.audio_channels,
         c_.last_kernel_size, true, 0.3);
    quantizer("quantizer.semantic_residual_vector_quantizer", c_.num_semantic_quantizers);
    quantizer("quantizer.acoustic_residual_vector_quantizer",
              c_.num_quantizers - c_.num_semantic_quantizers);
  }

  SafetensorsWriter& writer() { return writer_; }

 private:
  const MimiConfig& c_;
  uint64_t seed_;
  SafetensorsWriter writer_;
};

}  // namespace

MimiConfig small_codec_config(int64_t codebook_size, int64_t num_quantizers) {
  MimiConfig c;
  c.hidden_size = 32;
  c.num_filters = 8;
  c.upsampling_ratios = {8, 6, 5, 4};  // 24000 / (2 * 960) = 12.5 frames per second
  c.upsample_groups = 32;
  c.codebook_size = codebook_size;
  c.codebook_dim = 16;
  c.vector_quantization_hidden_dimension = 16;
  c.num_quantizers = num_quantizers;
  c.num_hidden_layers = 2;
  c.intermediate_size = 64;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.head_dim = 8;
  c.max_position_embeddings = 8000;
  c.sliding_window = 250;
  return c;
}

void write_random_codec(const MimiConfig& config, uint64_t seed, const std::filesystem::path& dir) {
  // Validate through the parser, so a codec we write is one we can read.
  const MimiConfig c = parse_mimi_config(mimi_config_to_json(config), "codec config");
  CodecBuilder b(c, seed ^ 0xc0dec0dec0dec0deull);
  b.build();
  b.writer().set_metadata("format", "pt");
  write_text_file_atomic(dir / "config.json", mimi_config_to_json(c).dump(2) + "\n");
  b.writer().write(dir / "model.safetensors");
}

}  // namespace drama

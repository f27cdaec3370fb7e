// Mimi weights as resident backend pointers, laid out like Hugging Face MimiModel's modules
// (tensor names in mimi_model.cpp). All float32.
#pragma once

#include <cstdint>
#include <vector>

namespace drama {

// A 1-D convolution (MimiConv1d: causal left padding of (kernel-1)*dilation - (stride-1)) or a
// transposed one (MimiConvTranspose1d: the right kernel-stride outputs trimmed). Weight layout
// as PyTorch: conv [out, in/groups, kernel], transposed [in, out/groups, kernel].
struct ConvWeights {
  const float* weight = nullptr;
  const float* bias = nullptr;  // may be null
  int64_t in = 0, out = 0, kernel = 1, stride = 1, dilation = 1, groups = 1;
  bool replicate = false;  // pad_mode "replicate" (the downsample) instead of zeros
};

// SEANet layers in HF module order: convolutions, ELUs and residual blocks
// (ELU, conv k=residual_kernel_size, ELU, conv k=1, plus the identity shortcut).
struct SeanetLayer {
  enum class Kind { Conv, ConvTranspose, Resnet, Elu } kind = Kind::Elu;
  ConvWeights conv;            // Conv, ConvTranspose
  ConvWeights block1, block3;  // Resnet
};

// Linear weights below are stored TRANSPOSED, [in, out] (CodecOps::linear_f32).
struct TransformerLayerWeights {
  const float* input_norm_w = nullptr;
  const float* input_norm_b = nullptr;
  const float* q = nullptr;  // q_proj [heads*head_dim, hidden], transposed
  const float* k = nullptr;  // k_proj [kv_heads*head_dim, hidden], transposed
  const float* v = nullptr;
  const float* o = nullptr;           // o_proj [hidden, heads*head_dim], transposed
  const float* attn_scale = nullptr;  // layer scale [hidden]
  const float* post_norm_w = nullptr;
  const float* post_norm_b = nullptr;
  const float* fc1 = nullptr;  // [intermediate, hidden], transposed
  const float* fc2 = nullptr;  // [hidden, intermediate], transposed
  const float* mlp_scale = nullptr;
};

struct RvqWeights {
  const float* input_proj = nullptr;    // [vq_dim, hidden, 1], transposed; null if vq_dim == hidden
  const float* output_proj = nullptr;   // [hidden, vq_dim, 1], transposed; or null
  std::vector<const float*> codebooks;  // each [codebook_size, vq_dim] = embed_sum / usage
};

struct MimiWeights {
  std::vector<SeanetLayer> encoder;
  std::vector<TransformerLayerWeights> encoder_transformer;
  ConvWeights downsample;  // stride 2, replicate padding
  ConvWeights upsample;
  std::vector<TransformerLayerWeights> decoder_transformer;
  std::vector<SeanetLayer> decoder;
  RvqWeights semantic, acoustic;
};

}  // namespace drama

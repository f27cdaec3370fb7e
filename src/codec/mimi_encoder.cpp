// Whole-utterance Mimi encode (HF MimiModel.encode without streaming): SEANet encoder ->
// encoder transformer -> downsample (replicate padding) -> split RVQ encode.
#include <optional>

#include "codec/codec_ops.h"
#include "codec/mimi.h"
#include "codec/mimi_layers.h"
#include "util/error.h"

namespace drama {

namespace {

// Residual VQ on x [frames, hidden]: codes for `count` codebooks into out[f * stride + k0 + k].
void rvq_encode(CodecOps& ops, const MimiConfig& c, const RvqWeights& rvq, const float* x,
                int64_t frames, int64_t count, int32_t* out, int64_t stride, int64_t k0) {
  if (count <= 0) return;
  Backend& b = ops.backend();
  const int64_t dim = c.codebook_dim;
  DeviceArray residual, quantized, negated, minus_one, codes;
  float* r = residual.ensure(b, frames * dim);
  if (rvq.input_proj)
    ops.linear_f32(rvq.input_proj, dim, c.hidden_size, x, frames, r);
  else
    ops.copy_block(r, dim, x, dim, frames, dim);
  float* q = quantized.ensure(b, frames * dim);
  float* neg = negated.ensure(b, frames * dim);
  float* m1 = minus_one.ensure(b, dim);
  ops.fill(m1, dim, 1, dim, -1.0f);
  auto* codes_dev = reinterpret_cast<int32_t*>(codes.ensure(b, frames));
  std::vector<int32_t> host(static_cast<size_t>(frames));
  for (int64_t k = 0; k < count; ++k) {
    b.vq_encode(rvq.codebooks[k], c.codebook_size, dim, r, frames, codes_dev);
    b.vq_decode(rvq.codebooks[k], dim, codes_dev, frames, q);
    b.scale_rows(q, m1, frames, dim, neg);  // residual -= quantized (negation is exact)
    b.add(neg, frames * dim, r);
    b.download(host.data(), codes_dev, host.size() * sizeof(int32_t));
    for (int64_t f = 0; f < frames; ++f) out[f * stride + k0 + k] = host[f];
  }
}

}  // namespace

std::vector<int32_t> MimiModel::encode(std::span<const float> pcm, int64_t num_codebooks) const {
  const MimiConfig& c = config_;
  if (num_codebooks < std::max<int64_t>(1, c.num_semantic_quantizers) ||
      num_codebooks > c.num_quantizers)
    throw Error("Mimi encode: " + std::to_string(num_codebooks) +
                " codebooks requested; this codec encodes " +
                std::to_string(std::max<int64_t>(1, c.num_semantic_quantizers)) + ".." +
                std::to_string(c.num_quantizers) + ".");
  if (pcm.empty()) throw Error("Mimi encode: the audio has no samples.");
  Backend& b = backend_;
  CodecOps ops(b);
  const int64_t hidden = c.hidden_size;
  DeviceArray input, rows, chans;
  float* x = input.ensure(b, static_cast<int64_t>(pcm.size()));
  b.upload(x, pcm.data(), pcm.size_bytes());

  SeanetStack encoder(ops, weights_.encoder);
  const int64_t t = encoder.forward(x, 1, static_cast<int64_t>(pcm.size()), true);
  float* r = rows.ensure(b, t * hidden);
  ops.transpose(encoder.out(), hidden, t, r);
  MimiTransformer transformer(ops, c, weights_.encoder_transformer);
  transformer.forward(r, t);
  float* ch = chans.ensure(b, t * hidden);
  ops.transpose(r, t, hidden, ch);

  const float* emb = ch;
  int64_t frames = t;
  DeviceArray down;
  if (weights_.downsample.weight) {
    StreamingConv1d downsample(ops, weights_.downsample);
    frames = downsample.forward(ch, t, true, down);
    emb = down.data();
  }
  float* frame_rows = rows.ensure(b, frames * hidden);
  ops.transpose(emb, hidden, frames, frame_rows);

  std::vector<int32_t> codes(static_cast<size_t>(frames * num_codebooks));
  const int64_t semantic = std::min<int64_t>(num_codebooks, c.num_semantic_quantizers);
  rvq_encode(ops, c, weights_.semantic, frame_rows, frames, semantic, codes.data(), num_codebooks,
             0);
  rvq_encode(ops, c, weights_.acoustic, frame_rows, frames, num_codebooks - semantic, codes.data(),
             num_codebooks, semantic);
  return codes;
}

}  // namespace drama

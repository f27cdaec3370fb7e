// Streaming Mimi decode: split RVQ decode -> upsample -> decoder transformer -> SEANet decoder,
// one frame at a time with every layer's left context carried (see mimi_layers.h).
#include <optional>

#include "codec/codec_ops.h"
#include "codec/mimi.h"
#include "codec/mimi_layers.h"
#include "util/error.h"

namespace drama {

struct MimiDecoderStream::State {
  explicit State(const MimiModel& m)
      : ops(m.backend()),
        decoder(ops, m.weights().decoder),
        transformer(ops, m.config(), m.weights().decoder_transformer) {
    if (m.weights().upsample.weight) upsample.emplace(ops, m.weights().upsample);
  }
  CodecOps ops;
  SeanetStack decoder;
  MimiTransformer transformer;
  std::optional<StreamingConvTranspose1d> upsample;
  DeviceArray codes, sum, tmp, embedding, acoustic, upsampled, rows, channels;
};

namespace {

// out [hidden] = output_proj(sum of codebook rows) for codes[first .. first+count).
void rvq_decode_frame(CodecOps& ops, const MimiConfig& c, const RvqWeights& rvq,
                      const int32_t* codes_dev, int64_t count, DeviceArray& sum, DeviceArray& tmp,
                      float* out) {
  Backend& b = ops.backend();
  const int64_t dim = c.codebook_dim;
  float* s = sum.ensure(b, dim);
  float* t = tmp.ensure(b, dim);
  for (int64_t k = 0; k < count; ++k) {
    b.vq_decode(rvq.codebooks[k], dim, codes_dev + k, 1, k == 0 ? s : t);
    if (k > 0) b.add(t, dim, s);
  }
  if (rvq.output_proj)
    ops.linear_f32(rvq.output_proj, c.hidden_size, dim, s, 1, out);
  else
    ops.copy_block(out, dim, s, dim, 1, dim);
}

}  // namespace

MimiDecoderStream::MimiDecoderStream(const MimiModel& model)
    : model_(model), state_(std::make_unique<State>(model)) {}

MimiDecoderStream::~MimiDecoderStream() = default;

void MimiDecoderStream::reset() {
  state_->decoder.reset();
  state_->transformer.reset();
  if (state_->upsample) state_->upsample->reset();
  frames_ = 0;
}

std::vector<float> MimiDecoderStream::decode_frame(std::span<const int32_t> codes) {
  std::vector<float> pcm;
  decode_frame(codes, pcm);
  return pcm;
}

void MimiDecoderStream::decode_frame(std::span<const int32_t> codes, std::vector<float>& pcm) {
  const MimiConfig& c = model_.config();
  const int64_t k = static_cast<int64_t>(codes.size());
  check_mimi_codes(model_, codes, 1, k, "Mimi decoder frame " + std::to_string(frames_));
  State& st = *state_;
  Backend& b = model_.backend();
  const int64_t hidden = c.hidden_size;
  auto* codes_dev = reinterpret_cast<int32_t*>(st.codes.ensure(b, k));
  b.upload(codes_dev, codes.data(), codes.size_bytes());

  // Split RVQ: semantic codebooks first, then acoustic; the two projections are summed.
  const int64_t semantic = std::min<int64_t>(k, c.num_semantic_quantizers);
  float* emb = st.embedding.ensure(b, hidden);
  if (semantic > 0)
    rvq_decode_frame(st.ops, c, model_.weights().semantic, codes_dev, semantic, st.sum, st.tmp,
                     emb);
  if (k > semantic) {
    float* ac = st.acoustic.ensure(b, hidden);
    rvq_decode_frame(st.ops, c, model_.weights().acoustic, codes_dev + semantic, k - semantic,
                     st.sum, st.tmp, semantic > 0 ? ac : emb);
    if (semantic > 0) b.add(ac, hidden, emb);
  }

  // [hidden, 1] -> upsample -> [hidden, T] (channel-major), T = resample stride.
  const float* x = emb;
  int64_t t = 1;
  if (st.upsample) {
    t = st.upsample->forward(emb, 1, st.upsampled);
    x = st.upsampled.data();
  }
  float* rows = st.rows.ensure(b, t * hidden);
  st.ops.transpose(x, hidden, t, rows);
  st.transformer.forward(rows, t);
  float* chans = st.channels.ensure(b, t * hidden);
  st.ops.transpose(rows, t, hidden, chans);
  const int64_t n = st.decoder.forward(chans, hidden, t, false);
  pcm.resize(static_cast<size_t>(n));
  b.download(pcm.data(), st.decoder.out(), static_cast<size_t>(n) * sizeof(float));
  ++frames_;
}

std::vector<float> MimiModel::decode(std::span<const int32_t> codes, int64_t frames,
                                     int64_t num_codebooks) const {
  check_mimi_codes(*this, codes, frames, num_codebooks, "Mimi decode");
  // The whole-utterance path IS the streaming path, so the two agree bit for bit.
  MimiDecoderStream stream(*this);
  std::vector<float> out, frame;
  out.reserve(static_cast<size_t>(frames * samples_per_frame()));
  for (int64_t f = 0; f < frames; ++f) {
    stream.decode_frame(codes.subspan(f * num_codebooks, num_codebooks), frame);
    out.insert(out.end(), frame.begin(), frame.end());
  }
  return out;
}

}  // namespace drama

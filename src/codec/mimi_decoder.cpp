// Streaming Mimi decode: split RVQ decode -> upsample -> decoder transformer -> SEANet decoder,
// one frame at a time with every layer's left context carried (see mimi_layers.h), for one
// stream or a batch of them in one pass.
#include <algorithm>
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
};

// One pass's activations (a stream's own for decode_frame, a MimiDecodeBatch's for a batch).
struct MimiDecodeScratch {
  SeanetScratch decoder;
  TransformerScratch transformer;
  ConvScratch upsample;
  DeviceArray codes, sum, tmp, embedding, acoustic, columns, upsampled, rows, channels;
  std::vector<int32_t> host_codes;
  std::vector<float> host_pcm;
};

namespace {

// out [n, hidden] = output_proj(sum of codebook rows) of n frames, for codebooks [0, count) of
// codes_dev (codebook-major: codebook k's n codes at k * n).
void rvq_decode_frames(CodecOps& ops, const MimiConfig& c, const RvqWeights& rvq,
                       const int32_t* codes_dev, int64_t n, int64_t count, DeviceArray& sum,
                       DeviceArray& tmp, float* out) {
  Backend& b = ops.backend();
  const int64_t dim = c.codebook_dim;
  float* s = sum.ensure(b, n * dim);
  float* t = tmp.ensure(b, n * dim);
  for (int64_t k = 0; k < count; ++k) {
    b.vq_decode(rvq.codebooks[k], dim, codes_dev + k * n, n, k == 0 ? s : t);
    if (k > 0) b.add(t, n * dim, s);
  }
  if (rvq.output_proj)
    ops.linear_f32(rvq.output_proj, c.hidden_size, dim, s, n, out);
  else
    ops.copy_block(out, dim, s, dim, n, dim);
}

// The pass: streams[i] decodes codes[i] into *pcm[i].
void decode_pass(const MimiModel& model, MimiDecodeScratch& sc,
                 std::span<MimiDecoderStream* const> streams,
                 std::span<MimiDecoderStream::State* const> states,
                 std::span<const std::span<const int32_t>> codes,
                 std::span<std::vector<float>* const> pcm) {
  const MimiConfig& c = model.config();
  Backend& b = model.backend();
  CodecOps& ops = states[0]->ops;
  const int64_t n = static_cast<int64_t>(streams.size());
  const int64_t k = static_cast<int64_t>(codes[0].size());
  const int64_t hidden = c.hidden_size;
  // Codebook-major on the device: codebook j's n codes at j * n.
  sc.host_codes.resize(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) sc.host_codes[j * n + i] = codes[i][j];
  auto* codes_dev = reinterpret_cast<int32_t*>(sc.codes.ensure(b, n * k));
  b.upload(codes_dev, sc.host_codes.data(), sc.host_codes.size() * sizeof(int32_t));

  // Split RVQ: semantic codebooks first, then acoustic; the two projections are summed.
  const int64_t semantic = std::min<int64_t>(k, c.num_semantic_quantizers);
  float* emb = sc.embedding.ensure(b, n * hidden);
  if (semantic > 0)
    rvq_decode_frames(ops, c, model.weights().semantic, codes_dev, n, semantic, sc.sum, sc.tmp,
                      emb);
  if (k > semantic) {
    float* ac = sc.acoustic.ensure(b, n * hidden);
    rvq_decode_frames(ops, c, model.weights().acoustic, codes_dev + semantic * n, n, k - semantic,
                      sc.sum, sc.tmp, semantic > 0 ? ac : emb);
    if (semantic > 0) b.add(ac, n * hidden, emb);
  }

  // [n, hidden] -> [hidden, n] -> upsample -> [hidden, n * t] (channel-major), t = resample
  // stride, stream i's columns at i * t.
  float* columns = sc.columns.ensure(b, n * hidden);
  ops.transpose(emb, n, hidden, columns);
  const float* x = columns;
  int64_t t = 1;
  if (states[0]->upsample) {
    std::vector<StreamingConvTranspose1d*> up(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) up[i] = &*states[i]->upsample;
    t = StreamingConvTranspose1d::forward_batch(up, columns, 1, sc.upsample, sc.upsampled);
    x = sc.upsampled.data();
  }
  float* rows = sc.rows.ensure(b, n * t * hidden);
  ops.transpose(x, hidden, n * t, rows);
  std::vector<MimiTransformer*> transformers(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) transformers[i] = &states[i]->transformer;
  MimiTransformer::forward_batch(transformers, rows, t, sc.transformer);
  float* chans = sc.channels.ensure(b, n * t * hidden);
  ops.transpose(rows, n * t, hidden, chans);
  std::vector<SeanetStack*> decoders(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) decoders[i] = &states[i]->decoder;
  const float* out = nullptr;
  const int64_t samples =
      SeanetStack::forward_batch(decoders, chans, hidden, t, false, sc.decoder, out);
  sc.host_pcm.resize(static_cast<size_t>(n * samples));
  b.download(sc.host_pcm.data(), out, sc.host_pcm.size() * sizeof(float));
  for (int64_t i = 0; i < n; ++i)
    pcm[i]->assign(sc.host_pcm.begin() + i * samples, sc.host_pcm.begin() + (i + 1) * samples);
}

}  // namespace

MimiDecoderStream::MimiDecoderStream(const MimiModel& model)
    : model_(model),
      state_(std::make_unique<State>(model)),
      scratch_(std::make_unique<MimiDecodeScratch>()) {}

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
  check_mimi_codes(model_, codes, 1, static_cast<int64_t>(codes.size()),
                   "Mimi decoder frame " + std::to_string(frames_));
  MimiDecoderStream* self = this;
  State* state = state_.get();
  std::vector<float>* out = &pcm;
  decode_pass(model_, *scratch_, {&self, 1}, {&state, 1}, {&codes, 1}, {&out, 1});
  ++frames_;
}

MimiDecodeBatch::MimiDecodeBatch(const MimiModel& model)
    : model_(model), scratch_(std::make_unique<MimiDecodeScratch>()) {}

MimiDecodeBatch::~MimiDecodeBatch() = default;

void MimiDecodeBatch::decode(std::span<MimiDecoderStream* const> streams,
                             std::span<const std::span<const int32_t>> codes,
                             std::span<std::vector<float>* const> pcm) {
  if (streams.size() != codes.size() || streams.size() != pcm.size())
    throw Error("Mimi decode batch: " + std::to_string(streams.size()) + " streams, " +
                std::to_string(codes.size()) + " frames and " + std::to_string(pcm.size()) +
                " outputs.");
  if (streams.empty()) return;
  // Every check before any stream changes.
  std::vector<MimiDecoderStream*> sorted(streams.begin(), streams.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw Error("Mimi decode batch: a stream appears twice in one pass.");
  std::vector<MimiDecoderStream::State*> states(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    MimiDecoderStream& s = *streams[i];
    if (&s.model_ != &model_) throw Error("Mimi decode batch: a stream of another codec.");
    if (codes[i].size() != codes[0].size())
      throw Error("Mimi decode batch: frames with " + std::to_string(codes[0].size()) + " and " +
                  std::to_string(codes[i].size()) + " codebooks in one pass.");
    check_mimi_codes(model_, codes[i], 1, static_cast<int64_t>(codes[i].size()),
                     "Mimi decoder frame " + std::to_string(s.frames_));
    states[i] = s.state_.get();
  }
  decode_pass(model_, *scratch_, streams, states, codes, pcm);
  for (MimiDecoderStream* s : streams) ++s->frames_;
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

// The Mimi codec (spec section 7; Hugging Face `MimiModel` semantics) on any Backend.
//
// Usage:
//   auto backend = make_backend({});
//   MimiModel codec(checkpoint_dir / "codec", *backend);   // config.json + model.safetensors
//   // Streaming decode (what the engine does per generated frame):
//   MimiDecoderStream stream(codec);
//   std::vector<float> pcm = stream.decode_frame(codes_of_one_frame);  // K codes ->
//                                                      // codec.samples_per_frame() samples
//   // Whole utterances:
//   std::vector<float> all = codec.decode(codes, frames, K);   // codes [frames, K] row-major
//   std::vector<int32_t> c = codec.encode(pcm_at_codec_rate, K);  // [frames, K]
//
// Streaming and whole decoding give bitwise identical samples: decode() is the stream run over
// every frame. K may be any count 1..num_quantizers (the first K codebooks; the first
// num_semantic_quantizers are semantic). Encoding follows HF's non-streaming encode: frames =
// ceil(samples / samples_per_frame()). Objects are not thread-safe; use one stream per session.
// A MimiModel must outlive its streams.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "codec/mimi_weights.h"
#include "format/mimi_config.h"

namespace drama {

class TensorSet;

class MimiModel {
 public:
  // Loads `dir`/config.json and `dir`/model.safetensors; refuses (drama::Error naming the file
  // and tensor) any tensor that is missing, of the wrong dtype or shape, or unexpected.
  MimiModel(const std::filesystem::path& dir, Backend& backend);
  ~MimiModel();
  MimiModel(const MimiModel&) = delete;
  MimiModel& operator=(const MimiModel&) = delete;

  const MimiConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }
  const MimiWeights& weights() const { return weights_; }
  int64_t sample_rate() const { return config_.sampling_rate; }
  double frame_rate() const { return config_.frame_rate(); }
  int64_t samples_per_frame() const { return config_.samples_per_frame(); }
  int64_t num_quantizers() const { return config_.num_quantizers; }
  int64_t codebook_size() const { return config_.codebook_size; }
  // SHA-256 of model.safetensors (voice files record it); computed once, on first use.
  const std::string& codec_sha256() const;
  const std::filesystem::path& dir() const { return dir_; }

  std::vector<float> decode(std::span<const int32_t> codes, int64_t frames,
                            int64_t num_codebooks) const;
  std::vector<int32_t> encode(std::span<const float> pcm, int64_t num_codebooks) const;

 private:
  std::filesystem::path dir_;
  Backend& backend_;
  MimiConfig config_;
  std::unique_ptr<TensorSet> tensors_;
  std::vector<std::vector<float>> host_codebooks_;  // embed_sum / max(cluster_usage, 1e-5)
  MimiWeights weights_;
  mutable std::once_flag sha_once_;
  mutable std::string sha256_;
};

struct MimiDecodeScratch;

class MimiDecoderStream {
 public:
  explicit MimiDecoderStream(const MimiModel& model);
  ~MimiDecoderStream();
  // One frame of K codes (1 <= K <= num_quantizers, each in [0, codebook_size)) -> the frame's
  // samples_per_frame() float samples. Throws drama::Error for bad codes (state unchanged).
  std::vector<float> decode_frame(std::span<const int32_t> codes);
  void decode_frame(std::span<const int32_t> codes, std::vector<float>& pcm);
  int64_t frames() const { return frames_; }
  void reset();  // start a new utterance
  struct State;  // the carried layer states (mimi_decoder.cpp)

 private:
  friend class MimiDecodeBatch;
  const MimiModel& model_;
  std::unique_ptr<State> state_;
  std::unique_ptr<MimiDecodeScratch> scratch_;
  int64_t frames_ = 0;
};

// Several streams' next frames in one pass, what a server decoding many sessions does: every
// layer runs once for all of them (mimi_layers.h), so its weights are read and its kernels
// launched once per pass rather than once per stream. Each stream's samples equal those of its
// own decode_frame() bit for bit, whatever the batch; decode_frame() is the batch of one.
// Every stream must decode `model`'s frames and each frame have the same number of codebooks.
// Bad codes in any frame throw drama::Error before any stream changes. Not thread-safe: one
// pass at a time per batch object (its scratch), and a stream in one pass at a time.
class MimiDecodeBatch {
 public:
  explicit MimiDecodeBatch(const MimiModel& model);
  ~MimiDecodeBatch();
  MimiDecodeBatch(const MimiDecodeBatch&) = delete;
  MimiDecodeBatch& operator=(const MimiDecodeBatch&) = delete;
  // streams[i] decodes codes[i] into *pcm[i] (samples_per_frame() samples).
  void decode(std::span<MimiDecoderStream* const> streams,
              std::span<const std::span<const int32_t>> codes,
              std::span<std::vector<float>* const> pcm);

 private:
  const MimiModel& model_;
  std::unique_ptr<MimiDecodeScratch> scratch_;
};

// Checks codes [frames, K] against a codec: K in 1..num_quantizers, each code in range. Throws
// drama::Error naming `label`, the frame and the codebook.
void check_mimi_codes(const MimiModel& model, std::span<const int32_t> codes, int64_t frames,
                      int64_t num_codebooks, const std::string& label);

}  // namespace drama

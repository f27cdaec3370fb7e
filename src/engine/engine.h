// The speech engine as its callers (CLI `say`, the HTTP server, benchmarks) see it: a verified,
// loaded checkpoint plus codec on one backend, turning a request into streamed PCM.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "format/safetensors.h"  // Residency
#include "format/voice.h"
#include "model/guidance.h"  // CfgMode

namespace drama {

struct SpeechRequest {
  std::string text;              // UTF-8, 1..4096 characters
  const Voice* voice = nullptr;  // none = unguided, one branch
  uint64_t seed = 0;
  SamplingParams sampling;
  float gamma = 1.5f;  // 1 = no guidance (the unconditional branch never runs)
  CfgMode cfg = CfgMode::Paired;
  double max_duration_s = 60.0;
  int64_t max_frames = -1;  // >= 0: also at most this many frames (tests, benches)
};

// Why generation stopped: the model said end of speech, the request's max_duration_s (or
// max_frames, or the model's position limit) was reached, or it was cancelled.
enum class SpeechStop { EndOfSpeech, MaxDuration, Cancelled };
// "end_of_speech", "max_duration", "cancelled" (the X-Drama-Stop-Reason value).
inline const char* speech_stop_name(SpeechStop s) {
  return s == SpeechStop::EndOfSpeech ? "end_of_speech"
         : s == SpeechStop::Cancelled ? "cancelled"
                                      : "max_duration";
}

struct SpeechResult {
  int64_t frames = 0;  // frames delivered
  int64_t samples = 0;
  bool reached_eos = false;
  bool cancelled = false;
  SpeechStop stop = SpeechStop::MaxDuration;
  double seconds_to_first_audio = 0;
  double seconds_total = 0;
};

// Called after every frame with that frame's PCM (float, [-1, 1], codec rate, mono). Return false
// to cancel (the client went away): generation stops before the next frame.
using AudioSink = std::function<bool(std::span<const float> pcm)>;
// Called after every frame with its K codes (the codec's input). Return false to cancel.
using CodesSink = std::function<bool(std::span<const int32_t> codes)>;

struct EngineOptions {
  BackendOptions backend;
  // Generations that run together in one batched step (`--lanes`); KV caches and workspaces are
  // allocated for this many at load. More callers wait, in order, for a lane.
  int lanes = 1;
  int prefill_chunk = 128;  // prompt rows per step (docs/model.md)
  // Positions each generation's caches hold (`--context`; 0: max_position_embeddings).
  int64_t context = 0;
  // Weights read into process memory (the default) or mapped (`--mmap`): docs/run.md.
  Residency weights = Residency::InMemory;
  CfgMode default_cfg = CfgMode::Paired;
};

// What the batched step has done since load (the server's /health and /metrics).
struct EngineStats {
  int64_t lanes = 1;
  int64_t active = 0;   // generations in the model now
  int64_t waiting = 0;  // submitted, waiting for a lane
  int64_t steps = 0;
  int64_t backbone_rows = 0;  // rows through the backbone over all steps
  int64_t frames = 0;         // frames made over all steps
  int64_t codec_passes = 0;   // codec decode passes (decode_passes.h)
  int64_t codec_frames = 0;   // frames decoded by them
};

class Engine {
 public:
  virtual ~Engine() = default;
  // speak() and generate_codes() may be called from several threads at once: up to `lanes`
  // generations run together, each giving exactly the bytes it gives alone.
  virtual SpeechResult speak(const SpeechRequest& request, const AudioSink& sink,
                             const std::atomic<bool>* cancel = nullptr) = 0;
  // The same generation without the codec: streams each frame's codes (`drama say -o x.codes`,
  // parity tools). speak() is this plus the streaming codec decoder.
  virtual SpeechResult generate_codes(const SpeechRequest& request, const CodesSink& sink,
                                      const std::atomic<bool>* cancel = nullptr) = 0;
  // Throws UsageError for a request speak() and generate_codes() would refuse (they check it
  // too): the server calls it before it sends a streamed reply's headers.
  virtual void check(const SpeechRequest& request) const { (void)request; }
  virtual std::string backend_name() const = 0;
  virtual std::string model_name() const = 0;
  virtual int64_t sample_rate() const = 0;
  virtual double frame_rate() const = 0;
  virtual std::string codec_sha256() const = 0;
  virtual SamplingParams default_sampling() const = 0;
  virtual float default_gamma() const = 0;
  virtual int64_t num_codebooks() const = 0;
  virtual EngineStats stats() const { return {}; }
  // The voice writer: reference audio (mono, codec rate) + transcript -> voice.
  virtual Voice make_voice(std::span<const float> pcm, const std::string& transcript) = 0;
};

// The device-lock id of a backend selection: "cpu", or "cuda0" when it runs on the GPU.
std::string engine_device_id(const BackendOptions& options);

// Loads a checkpoint directory that the launcher has already verified. Refuses (drama::Error) a
// codec whose codebook size differs from the model's or that has fewer quantizers than the model's
// codebooks. Requests are refused when text is empty or over 4096 characters, a voice does not
// match the model (codebook count) or the codec (codec_sha256), or the prompt exceeds the model's
// context (EngineOptions::context, else max_position_embeddings).
std::unique_ptr<Engine> load_engine(const std::filesystem::path& checkpoint_dir,
                                    const EngineOptions& options);

}  // namespace drama

// load_engine: Checkpoint + backend + Drama3Model + Mimi codec, and the streaming speak() loop
// (spec section 6 for generation, section 7 for streamed decoding, section 8 for voices).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "codec/mimi.h"
#include "engine/decode_passes.h"
#include "engine/scheduler.h"
#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// How speak() shares the CPU threads between the model and the codec. The model's step runs on
// the scheduler's thread and each request's codec on the request's thread (a pipeline: the codec
// decodes frame n while the model makes frame n + 1). With two or more threads the codec gets a
// backend of its own with max(1, T/4) of the T threads and the model keeps the rest; with one
// thread both share one single-threaded backend. Neither split changes a byte: both are
// thread-count invariant. On a GPU the codec always gets a backend of its own on the same
// device: its own stream beside the model's (and its own scratch), so the model's step, captured
// as a graph on its stream, never takes in a codec kernel.
struct ThreadPlan {
  BackendOptions model, codec;
  bool pipelined = false;
};

ThreadPlan plan_threads(const BackendOptions& options) {
  ThreadPlan p{options, options, false};
  if (engine_device_id(options) != "cpu") {
    p.pipelined = true;
    return p;
  }
  const int total = options.threads > 0 ? options.threads : available_cores();
  if (total < 2) return p;
  p.codec.threads = std::max(1, total / 4);
  p.model.threads = total - p.codec.threads;
  p.pipelined = true;
  return p;
}

class DramaEngine final : public Engine {
 public:
  DramaEngine(const std::filesystem::path& dir, const EngineOptions& options)
      : checkpoint_(dir, options.weights) {
    const ThreadPlan plan = plan_threads(options.backend);
    backend_ = make_backend(plan.model);
    if (plan.pipelined) codec_backend_ = make_backend(plan.codec);
    ModelCapacity capacity;
    capacity.lanes = options.lanes;
    capacity.prefill_chunk = options.prefill_chunk;
    capacity.max_positions = options.context;
    model_ = std::make_unique<Drama3Model>(checkpoint_, *backend_, capacity);
    const auto& audio = checkpoint_.config().audio;
    if (std::filesystem::exists(dir / "codec" / "config.json")) {
      codec_ =
          std::make_unique<MimiModel>(dir / "codec", codec_backend_ ? *codec_backend_ : *backend_);
      if (codec_->codebook_size() != audio.codebook_size)
        throw Error(dir.string() + "/codec: codebook_size " +
                    std::to_string(codec_->codebook_size()) + " differs from the model's " +
                    std::to_string(audio.codebook_size));
      if (codec_->num_quantizers() < audio.num_codebooks)
        throw Error(dir.string() + "/codec: " + std::to_string(codec_->num_quantizers()) +
                    " quantizers, fewer than the model's " + std::to_string(audio.num_codebooks) +
                    " codebooks");
      decode_passes_ = std::make_unique<DecodePasses>(*codec_, codec_mutex_);
    }
    name_ = std::filesystem::weakly_canonical(dir).filename().string();
    scheduler_ = std::make_unique<FrameScheduler>(*model_);
  }

  SpeechResult speak(const SpeechRequest& request, const AudioSink& sink,
                     const std::atomic<bool>* cancel) override {
    if (!codec_)
      throw Error(checkpoint_.dir().string() + " has no codec/ directory; only codes can be made");
    // The codec decodes each frame on a request's thread while the model's step (on the
    // scheduler's thread) makes the next one: a pipeline. The frames of requests that arrive
    // together share a pass (decode_passes.h).
    MimiDecoderStream stream(*codec_);
    std::vector<float> pcm;
    int64_t samples = 0;
    const double t0 = now_s();
    double first = -1;
    auto deliver = [&](std::span<const int32_t> codes) {
      decode_passes_->decode(stream, codes, pcm);
      samples += static_cast<int64_t>(pcm.size());
      if (first < 0) first = now_s() - t0;
      return sink(pcm);
    };
    SpeechResult r = generate_codes(request, deliver, cancel);
    r.samples = samples;
    r.seconds_to_first_audio = first < 0 ? 0 : first;
    return r;
  }

  void check(const SpeechRequest& request) const override { (void)session_spec(request); }

  SpeechResult generate_codes(const SpeechRequest& request, const CodesSink& sink,
                              const std::atomic<bool>* cancel) override {
    const double t0 = now_s();
    SessionSpec spec = session_spec(request);
    spec.cancel = cancel;
    SpeechResult r;
    double first = -1;
    GenerationResult g =
        scheduler_->run(std::move(spec), [&](int64_t, std::span<const int32_t> codes) {
          if (first < 0) first = now_s() - t0;
          return sink ? sink(codes) : true;
        });
    r.frames = g.frames;
    r.reached_eos = g.stop == StopReason::Eos;
    r.cancelled = g.stop == StopReason::Cancelled;
    r.stop = r.reached_eos ? SpeechStop::EndOfSpeech
             : r.cancelled ? SpeechStop::Cancelled
                           : SpeechStop::MaxDuration;
    r.seconds_to_first_audio = first < 0 ? 0 : first;
    r.seconds_total = now_s() - t0;
    return r;
  }

  std::string backend_name() const override {
    if (!codec_backend_) return backend_->name();
    return backend_->name() + ", codec beside it on " + codec_backend_->name();
  }
  std::string model_name() const override { return name_; }
  int64_t sample_rate() const override {
    return codec_ ? codec_->sample_rate() : checkpoint_.config().audio.sample_rate;
  }
  double frame_rate() const override { return checkpoint_.config().audio.frame_rate; }
  std::string codec_sha256() const override { return codec_ ? codec_->codec_sha256() : ""; }
  SamplingParams default_sampling() const override {
    const auto& s = checkpoint_.config().sampling;
    return {static_cast<float>(s.temperature), static_cast<int32_t>(s.top_k),
            static_cast<float>(s.top_p)};
  }
  float default_gamma() const override {
    return static_cast<float>(checkpoint_.config().default_gamma);
  }
  int64_t num_codebooks() const override { return checkpoint_.config().audio.num_codebooks; }
  EngineStats stats() const override {
    const SchedulerStats s = scheduler_->stats();
    EngineStats e;
    e.lanes = s.lanes;
    e.active = s.active;
    e.waiting = s.waiting;
    e.steps = s.steps.steps;
    e.backbone_rows = s.steps.backbone_rows;
    e.frames = s.steps.frames;
    if (decode_passes_) {
      e.codec_passes = decode_passes_->passes();
      e.codec_frames = decode_passes_->frames();
    }
    return e;
  }

  Voice make_voice(std::span<const float> pcm, const std::string& transcript) override {
    if (!codec_) throw Error(checkpoint_.dir().string() + " has no codec/ directory");
    Voice v;
    v.num_codebooks = num_codebooks();
    {
      std::lock_guard lock(codec_mutex_);
      v.codes = codec_->encode(pcm, v.num_codebooks);
    }
    v.frames = static_cast<int64_t>(v.codes.size()) / v.num_codebooks;
    v.transcript = transcript;
    v.sample_rate = codec_->sample_rate();
    v.frame_rate = codec_->frame_rate();
    v.codec_sha256 = codec_->codec_sha256();
    return v;
  }

 private:
  static int64_t count_characters(const std::string& s) {
    int64_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
    return n;
  }

  Checkpoint checkpoint_;
  std::unique_ptr<Backend> backend_;
  // The model's session for a request, or UsageError for one the engine refuses: empty or
  // over-long text, a bad gamma, a voice of another model or codec, a prompt longer than the
  // model's context (--context, else max_position_embeddings).
  SessionSpec session_spec(const SpeechRequest& request) const {
    const Drama3Config& c = checkpoint_.config();
    if (request.text.empty()) throw UsageError("the text to speak is empty");
    if (request.text.size() > 4 * 4096 || count_characters(request.text) > 4096)
      throw UsageError("the text to speak is longer than 4096 characters");
    if (!(request.gamma >= 0.0f) || !std::isfinite(request.gamma))
      throw UsageError("guidance gamma must be a finite number >= 0");
    const bool guided = request.voice && request.gamma != 1.0f;
    SessionSpec spec;
    if (request.voice) {
      check_voice(c, *request.voice, codec_sha256());
      spec.cond = conditional_prompt(c, request.text, *request.voice);
    } else {
      spec.cond = unconditional_prompt(c, request.text);
    }
    if (guided) spec.uncond = unconditional_prompt(c, request.text);
    const int64_t context = model_->max_positions();
    if (spec.cond.rows > context)
      throw UsageError("the text" + std::string(request.voice ? " and the voice" : "") +
                       " make a prompt of " + std::to_string(spec.cond.rows) +
                       " positions, more than the " + std::to_string(context) +
                       " of the model's context (--context; max_position_embeddings " +
                       std::to_string(c.backbone.max_position_embeddings) +
                       "); shorten the text or the reference voice");
    GenerationOptions& o = spec.options;
    o.seed = request.seed;
    o.sampling = request.sampling;
    o.gamma = request.gamma;
    o.cfg = request.cfg;
    o.max_frames =
        static_cast<int64_t>(std::floor(request.max_duration_s * c.audio.frame_rate + 1e-9));
    if (request.max_frames >= 0) o.max_frames = std::min(o.max_frames, request.max_frames);
    return spec;
  }

  // Set: speak() pipelines the codec beside the model; null: the codec shares backend_.
  std::unique_ptr<Backend> codec_backend_;
  std::unique_ptr<Drama3Model> model_;
  std::unique_ptr<MimiModel> codec_;
  // Every request's codec work (a pass of frames, a voice's encode) runs on the one codec backend
  // from a request's thread, one at a time: on CUDA that backend is one stream with one
  // scratch area, and two requests' kernels interleaved there overwrite each other's partial
  // sums (the codec transformer's attention; found on the H200 by the lanes test, 2026-12-02).
  // The CPU backend runs one kernel at a time anyway, so no byte and little time changes there.
  std::mutex codec_mutex_;
  std::unique_ptr<DecodePasses> decode_passes_;  // every request's frames, in shared passes
  std::string name_;
  std::unique_ptr<FrameScheduler> scheduler_;  // last: stopped first
};

}  // namespace

#ifdef DRAMA_WITH_CUDA
bool cuda_device_present();  // src/backend/cuda/
#endif

std::string engine_device_id(const BackendOptions& options) {
#ifdef DRAMA_WITH_CUDA
  if (options.kind == "cuda" || (options.kind == "auto" && cuda_device_present())) return "cuda0";
#endif
  (void)options;
  return "cpu";
}

std::unique_ptr<Engine> load_engine(const std::filesystem::path& checkpoint_dir,
                                    const EngineOptions& options) {
  return std::make_unique<DramaEngine>(checkpoint_dir, options);
}

}  // namespace drama

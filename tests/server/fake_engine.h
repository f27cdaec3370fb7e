// A deterministic stand-in for the real engine: PCM is a function of (text, seed, voice, gamma,
// sampling) only, never of cfg mode, streaming or timing, like the real engine's contract.
// Optional per-frame delay lets tests hold the engine busy and cancel mid-stream.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/engine.h"
#include "util/sampling.h"

namespace drama::testing {

class FakeEngine : public Engine {
 public:
  std::atomic<int> frame_delay_ms{0};
  std::atomic<int64_t> frames_generated{0};
  std::atomic<int> speak_calls{0};
  std::atomic<int> cancelled_calls{0};

  SpeechResult speak(const SpeechRequest& request, const AudioSink& sink,
                     const std::atomic<bool>* cancel) override {
    ++speak_calls;
    auto start = std::chrono::steady_clock::now();
    uint64_t key = hash(request.text) ^ mix64(request.seed);
    if (request.voice)
      key ^= mix64(hash(request.voice->transcript) + uint64_t(request.voice->frames));
    uint32_t g = 0, t = 0;
    std::memcpy(&g, &request.gamma, 4);
    std::memcpy(&t, &request.sampling.temperature, 4);
    key = mix64(key ^ (uint64_t(g) << 32) ^ t ^ (uint64_t(request.sampling.top_k) << 7));
    int64_t frames = 4 + int64_t(hash(request.text) % 5);
    frames = std::min<int64_t>(frames, int64_t(request.max_duration_s * frame_rate()));
    SpeechResult r;
    std::vector<float> pcm(kSamplesPerFrame);
    for (int64_t f = 0; f < frames; ++f) {
      if (cancel && cancel->load()) {
        r.cancelled = true;
        break;
      }
      if (int d = frame_delay_ms.load()) std::this_thread::sleep_for(std::chrono::milliseconds(d));
      for (size_t i = 0; i < pcm.size(); ++i) {
        double u = counter_uniform(key, uint64_t(f), i);
        pcm[i] = float(0.4 * std::sin(0.05 * double(i + size_t(f) * pcm.size())) + 0.5 * (u - 0.5));
      }
      ++frames_generated;
      r.frames++;
      r.samples += int64_t(pcm.size());
      if (f == 0) r.seconds_to_first_audio = seconds_since(start);
      if (!sink(pcm)) {
        r.cancelled = true;
        break;
      }
    }
    if (r.cancelled) ++cancelled_calls;
    // Stops at max_duration_s when that cuts the utterance short, as the real engine does.
    const bool cut = frames < 4 + int64_t(hash(request.text) % 5);
    r.reached_eos = !r.cancelled && !cut;
    r.stop = r.cancelled ? SpeechStop::Cancelled
             : cut       ? SpeechStop::MaxDuration
                         : SpeechStop::EndOfSpeech;
    r.seconds_total = seconds_since(start);
    return r;
  }
  SpeechResult generate_codes(const SpeechRequest& request, const CodesSink& sink,
                              const std::atomic<bool>* cancel) override {
    std::vector<int32_t> codes(static_cast<size_t>(num_codebooks()));
    return speak(
        request,
        [&](std::span<const float> pcm) {
          for (size_t k = 0; k < codes.size(); ++k)
            codes[k] = int32_t(std::lrint(double(pcm[k]) * 1000)) & 2047;
          return sink(codes);
        },
        cancel);
  }
  int64_t num_codebooks() const override { return 8; }
  std::string backend_name() const override { return "fake"; }
  std::string model_name() const override { return "fake-drama"; }
  int64_t sample_rate() const override { return 24000; }
  double frame_rate() const override { return 12.5; }
  std::string codec_sha256() const override { return std::string(64, 'f'); }
  SamplingParams default_sampling() const override { return {}; }
  float default_gamma() const override { return 1.5f; }
  Voice make_voice(std::span<const float> pcm, const std::string& transcript) override {
    Voice v;
    v.num_codebooks = 8;
    v.frames = std::max<int64_t>(1, int64_t(pcm.size()) / int64_t(kSamplesPerFrame));
    uint64_t h = hash(transcript);
    for (float x : pcm) h = mix64(h ^ uint64_t(std::lrint(double(x) * 1000)));
    for (int64_t i = 0; i < v.frames * v.num_codebooks; ++i)
      v.codes.push_back(int32_t(mix64(h + uint64_t(i)) % 2048));
    v.transcript = transcript;
    v.codec_sha256 = codec_sha256();
    return v;
  }

  static constexpr size_t kSamplesPerFrame = 1920;

 private:
  static uint64_t hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
};

}  // namespace drama::testing

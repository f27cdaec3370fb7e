// `drama say`: one utterance into a file (interfaces.md). `--format codes` (or a .codes output)
// writes the generated codes instead of audio.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>

#include "audio/audio_io.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "engine/engine.h"
#include "format/voice.h"
#include "util/error.h"

namespace drama::cli {

namespace {

struct SayOptions {
  std::string text, voice, output = "out.wav", format, cfg = "paired";
  std::optional<uint64_t> seed;
  std::optional<float> temperature, top_p, gamma;
  std::optional<int32_t> top_k;
  int64_t max_frames = -1;
  WeightsOptions weights;
};

std::string format_of(const SayOptions& o) {
  if (!o.format.empty()) return o.format;
  const std::string ext = std::filesystem::path(o.output).extension().string();
  if (ext == ".codes") return "codes";
  if (ext == ".pcm" || ext == ".raw") return "pcm";
  if (ext == ".flac") return "flac";
  return "wav";
}

int run_say(const SayOptions& o) {
  const std::string format = format_of(o);
  ResolvedCheckpoint resolved = resolve_weights(o.weights);
  EngineOptions eo;
  eo.backend = o.weights.backend;
  eo.weights = o.weights.residency();
  auto engine = load_engine(resolved.dir, eo);
  std::optional<Voice> voice;
  if (!o.voice.empty()) voice = read_voice(o.voice);

  SpeechRequest req;
  req.text = o.text;
  req.voice = voice ? &*voice : nullptr;
  req.seed = o.seed ? *o.seed : std::random_device{}();
  req.sampling = engine->default_sampling();
  if (o.temperature) req.sampling.temperature = *o.temperature;
  if (o.top_k) req.sampling.top_k = *o.top_k;
  if (o.top_p) req.sampling.top_p = *o.top_p;
  req.gamma = o.gamma ? *o.gamma : engine->default_gamma();
  req.cfg = o.cfg == "separate" ? CfgMode::Separate : CfgMode::Paired;
  req.max_frames = o.max_frames;
  std::fprintf(stderr, "drama say: backend %s, seed %llu\n", engine->backend_name().c_str(),
               static_cast<unsigned long long>(req.seed));

  SpeechResult r;
  if (format == "codes") {
    Voice codes;
    codes.num_codebooks = engine->num_codebooks();
    codes.sample_rate = engine->sample_rate();
    codes.frame_rate = engine->frame_rate();
    codes.codec_sha256 = engine->codec_sha256();
    r = engine->generate_codes(req, [&](std::span<const int32_t> c) {
      codes.codes.insert(codes.codes.end(), c.begin(), c.end());
      ++codes.frames;
      return true;
    });
    write_codes(o.output, codes);
  } else {
    std::vector<float> pcm;
    r = engine->speak(req, [&](std::span<const float> p) {
      pcm.insert(pcm.end(), p.begin(), p.end());
      return true;
    });
    write_audio_file(o.output, pcm, engine->sample_rate(),
                     audio_format_from_name(format, "--format"));
  }
  std::fprintf(stderr, "drama say: %lld frames%s in %.2f s -> %s\n",
               static_cast<long long>(r.frames), r.reached_eos ? " (eos)" : "", r.seconds_total,
               o.output.c_str());
  return 0;
}

}  // namespace

void register_say(CLI::App& app, Runner& run) {
  auto o = std::make_shared<SayOptions>();
  auto* sub = app.add_subcommand("say", "Speak one utterance into an audio file");
  sub->add_option("text", o->text, "Text to speak (UTF-8)")->required();
  sub->add_option("--voice", o->voice, "Voice file (reference for guidance)");
  sub->add_option("-o,--output", o->output, "Output file (.wav, .pcm, .flac or .codes)");
  sub->add_option("--seed", o->seed, "Sampling seed (default: random, printed)");
  sub->add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", o->top_k, "Top-k (0 = off)")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", o->top_p, "Top-p in (0, 1]")->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--gamma", o->gamma, "Guidance scale (1 = no guidance)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--cfg", o->cfg, "paired or separate guidance execution")
      ->check(CLI::IsMember({"paired", "separate"}));
  sub->add_option("--format", o->format, "wav, pcm, flac or codes (default: from -o)")
      ->check(CLI::IsMember({"wav", "pcm", "flac", "codes"}));
  sub->add_option("--max-frames", o->max_frames, "Stop after this many frames")
      ->check(CLI::NonNegativeNumber);
  add_weights_options(*sub, o->weights);
  sub->callback([&run, o] { run = [o] { return run_say(*o); }; });
}

}  // namespace drama::cli

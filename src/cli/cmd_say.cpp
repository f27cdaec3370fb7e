// `drama say`: one utterance into a file (interfaces.md). `--format codes` (or a .codes output)
// writes the generated codes instead of audio.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>

#include "audio/audio_io.h"
#include "audio/time_stretch.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "engine/engine.h"
#include "format/builtin_voices.h"
#include "format/voice.h"
#include "util/error.h"
#include "util/request_rules.h"

namespace drama::cli {

namespace {

struct SayOptions {
  std::string text, voice, output = "out.wav", format, cfg = "paired";
  std::optional<uint64_t> seed;
  std::optional<double> temperature, top_p, gamma;
  std::optional<int64_t> top_k;
  double max_duration_s = rules::kMaxDurationSeconds;
  double speed = 1.0;
  int64_t max_frames = -1;
  WeightsOptions weights;
};

// --format, else the extension of -o: .wav .flac .pcm .raw .mp3 .opus .codes; any other
// extension is refused rather than written as WAV under that name.
std::string format_of(const SayOptions& o) {
  if (!o.format.empty()) return o.format;
  if (std::filesystem::path(o.output).extension() == ".codes") return "codes";
  switch (audio_format_from_path(o.output)) {
    case AudioFormat::Wav:
      return "wav";
    case AudioFormat::Flac:
      return "flac";
    case AudioFormat::Pcm:
      return "pcm";
    case AudioFormat::Mp3:
      return "mp3";
    case AudioFormat::Opus:
      return "opus";
  }
  return "wav";
}

// The server's rules (util/request_rules.h), checked before anything loads.
void check_say_options(const SayOptions& o) {
  if (o.temperature) rules::check_temperature(*o.temperature, "--temperature");
  if (o.top_k) rules::check_top_k(*o.top_k, "--top-k");
  if (o.top_p) rules::check_top_p(*o.top_p, "--top-p");
  if (o.gamma) rules::check_gamma(*o.gamma, "--gamma");
  rules::check_max_duration(o.max_duration_s, "--max-duration");
  rules::check_speed(o.speed, "--speed");
}

// --voice: a voice file, or the id of one of the checkpoint's built-in voices. A value that could
// be either (an id, and a file of that name in the working directory) is refused: ./ID names the
// file.
std::shared_ptr<const Voice> say_voice(const std::string& arg,
                                       const std::vector<BuiltinVoice>& builtin) {
  const BuiltinVoice* found = nullptr;
  std::string ids;
  for (const auto& v : builtin) {
    if (v.id == arg) found = &v;
    ids += (ids.empty() ? "" : ", ") + v.id;
  }
  std::error_code ec;
  const bool file = std::filesystem::exists(arg, ec);
  if (found && file)
    throw UsageError("--voice " + arg +
                     " names both a file and a built-in voice of the checkpoint; write ./" + arg +
                     " for the file");
  if (found) return found->voice;
  if (file || !is_valid_voice_id(arg)) return std::make_shared<const Voice>(read_voice(arg));
  throw Error("--voice " + arg +
              ": no such voice file, and the checkpoint has no built-in voice '" + arg +
              "' (built-in voices: " + (ids.empty() ? "none" : ids) + ")");
}

int run_say(const SayOptions& o) {
  check_say_options(o);
  const std::string format = format_of(o);
  if (format == "codes" && o.speed != 1.0)
    throw UsageError("--speed applies to audio, not to codes output");
  ResolvedCheckpoint resolved = resolve_weights(o.weights);
  // Built-in voices are files of the checkpoint: verified with it (a bad one fails every say).
  const std::vector<BuiltinVoice> builtin = load_builtin_voices(resolved.dir, resolved.manifest);
  std::shared_ptr<const Voice> voice;
  if (!o.voice.empty()) voice = say_voice(o.voice, builtin);
  EngineOptions eo;
  eo.backend = o.weights.backend;
  eo.weights = o.weights.residency();
  auto engine = load_engine(resolved.dir, eo);

  SpeechRequest req;
  req.text = o.text;
  req.voice = voice.get();
  req.seed = o.seed ? *o.seed : std::random_device{}();
  req.sampling = engine->default_sampling();
  if (o.temperature) req.sampling.temperature = static_cast<float>(*o.temperature);
  if (o.top_k) req.sampling.top_k = static_cast<int32_t>(*o.top_k);
  if (o.top_p) req.sampling.top_p = static_cast<float>(*o.top_p);
  req.gamma = o.gamma ? static_cast<float>(*o.gamma) : engine->default_gamma();
  req.max_duration_s = o.max_duration_s;
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
    if (o.speed != 1.0) pcm = time_stretch(pcm, engine->sample_rate(), o.speed);
    write_audio_file(o.output, pcm, engine->sample_rate(),
                     audio_format_from_name(format, "--format"));
  }
  std::fprintf(stderr, "drama say: %lld frames (stopped: %s) in %.2f s -> %s\n",
               static_cast<long long>(r.frames), speech_stop_name(r.stop), r.seconds_total,
               o.output.c_str());
  return 0;
}

}  // namespace

void register_say(CLI::App& app, Runner& run) {
  auto o = std::make_shared<SayOptions>();
  auto* sub = app.add_subcommand("say", "Speak one utterance into an audio file");
  sub->add_option("text", o->text, "Text to speak (UTF-8)")->required();
  sub->add_option("--voice", o->voice,
                  "Voice file, or the id of a built-in voice of the checkpoint (reference for "
                  "guidance)");
  sub->add_option("-o,--output", o->output,
                  "Output file; the format follows the extension (.wav .flac .pcm .mp3 .opus "
                  ".codes)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Sampling seed (default: random, printed)");
  sub->add_option("--temperature", o->temperature,
                  "Sampling temperature in [0, 2], 0 = greedy (default: the checkpoint's)");
  sub->add_option("--top-k", o->top_k, "Top-k in [0, 100000], 0 = off (default: the checkpoint's)");
  sub->add_option("--top-p", o->top_p, "Top-p in (0, 1] (default: the checkpoint's)");
  sub->add_option("--gamma", o->gamma,
                  "Guidance scale in [0, 10], 1 = no guidance (default: the checkpoint's)");
  sub->add_option("--cfg", o->cfg, "paired or separate guidance execution")
      ->check(CLI::IsMember({"paired", "separate"}))
      ->capture_default_str();
  sub->add_option("--format", o->format, "wav, pcm, flac, mp3, opus or codes (default: from -o)")
      ->check(CLI::IsMember({"wav", "pcm", "flac", "mp3", "opus", "codes"}));
  sub->add_option("--max-duration", o->max_duration_s, "Most seconds of audio, in (0, 60]")
      ->capture_default_str();
  sub->add_option("--speed", o->speed, "Tempo in [0.25, 4], pitch kept (1 = unchanged)")
      ->capture_default_str();
  sub->add_option("--max-frames", o->max_frames, "Stop after this many frames (-1 = no limit)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40))
      ->capture_default_str();
  add_weights_options(*sub, o->weights);
  sub->callback([&run, o] { run = [o] { return run_say(*o); }; });
}

}  // namespace drama::cli

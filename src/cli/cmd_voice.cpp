// `drama voice write REF_AUDIO --transcript TEXT -o VOICE` (interfaces.md, spec section 8), and
// `... --into CHECKPOINT_DIR --id ID`: the same voice written into the checkpoint as a built-in
// voice, with its manifest re-pinned (docs/checkpoints.md, "Built-in voices").
#include <cstdio>
#include <memory>
#include <string>

#include "audio/audio_io.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "codec/codec_cli.h"
#include "codec/voice_writer.h"
#include "format/builtin_voices.h"
#include "format/voice.h"
#include "util/error.h"

namespace drama::cli {

namespace {
struct VoiceArgs {
  CodecWeightsOptions codec;
  std::string audio, transcript, output;
  std::string into, id, name;
  int64_t created = 0;
};

// -o or --into (with --id), and with --into no other source for the codec: the voice must be
// encoded with the codec of the checkpoint it goes into.
void check_destination(const CLI::App& write, const VoiceArgs& a) {
  const bool out = !a.output.empty(), into = !a.into.empty();
  if (out == into) throw UsageError("give -o VOICE or --into CHECKPOINT_DIR (one of them)");
  if (!into) {
    for (const char* opt : {"--id", "--name", "--created"})
      if (write.count(opt)) throw UsageError(std::string(opt) + " goes with --into");
    return;
  }
  if (a.id.empty()) throw UsageError("--into needs --id ID (the built-in voice's id)");
  if (!is_valid_voice_id(a.id))
    throw UsageError("--id " + a.id + ": must be 1 to 64 characters from [A-Za-z0-9_-]");
  for (const char* opt : {"--weights", "--checkpoint", "--manifest", "--codec", "--num-codebooks"})
    if (write.count(opt))
      throw UsageError(std::string("--into encodes with the checkpoint's own codec (verified "
                                   "against its manifest.json); leave out ") +
                       opt);
}
}  // namespace

void register_voice(CLI::App& app, Runner& run) {
  auto* voice = app.add_subcommand("voice", "Write a voice file from reference audio");
  voice->require_subcommand(1);
  auto args = std::make_shared<VoiceArgs>();
  auto* write = voice->add_subcommand(
      "write", "Reference audio + transcript -> voice file, or a built-in voice of a checkpoint");
  write->add_option("REF_AUDIO", args->audio, "reference audio, WAV/FLAC, 1 to 60 s")->required();
  write->add_option("--transcript", args->transcript, "the words spoken in the reference")
      ->required();
  write->add_option("-o,--output", args->output, "voice file to write");
  write->add_option("--into", args->into,
                    "checkpoint directory to add the voice to as a built-in voice: encoded with "
                    "its codec, written to voices/ID.voice + voices/ID.json, and its "
                    "manifest.json re-pinned");
  write->add_option("--id", args->id, "with --into: the built-in voice's id ([A-Za-z0-9_-]{1,64})");
  write->add_option("--name", args->name, "with --into: its display name (default: the id)");
  write
      ->add_option("--created", args->created,
                   "with --into: its creation time in unix seconds (default 0, so the same "
                   "input gives the same bytes)")
      ->check(CLI::NonNegativeNumber);
  add_codec_weights_options(*write, args->codec);
  write->callback([&run, args, write] {
    run = [args, write] {
      check_destination(*write, *args);
      if (!args->into.empty()) check_builtin_id_free(args->into, args->id);
      if (!is_usable_transcript(args->transcript))
        throw UsageError("--transcript is empty or not valid UTF-8.");
      // Read and check the audio before loading the codec: refusals come fast.
      const DecodedAudio audio = read_audio_file(args->audio);
      CodecWeightsOptions source = args->codec;
      if (!args->into.empty()) {
        source.weights.checkpoint = args->into;
        source.weights.manifest = (std::filesystem::path(args->into) / "manifest.json").string();
      }
      CodecForCli loaded = load_codec_checked(*write, source);
      LoadedCodec& lc = loaded.codec;
      const Voice v =
          make_voice_from_audio(*lc.model, audio, args->transcript, lc.num_codebooks, args->audio);
      if (args->into.empty()) {
        write_voice(args->output, v);
        std::fprintf(stderr, "voice write: %lld frames -> %s\n", static_cast<long long>(v.frames),
                     args->output.c_str());
        return 0;
      }
      const Manifest m = add_builtin_voice(args->into, loaded.checkpoint->manifest,
                                           NewBuiltinVoice{args->id, args->name, args->created, v});
      std::fprintf(stderr,
                   "voice write: %lld frames -> built-in voice '%s' in %s (manifest '%s' "
                   "re-pinned, revision %s)\n",
                   static_cast<long long>(v.frames), args->id.c_str(), args->into.c_str(),
                   m.name.c_str(), m.revision.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli

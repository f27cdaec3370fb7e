// `drama voice write REF_AUDIO --transcript TEXT -o VOICE` (interfaces.md, spec section 8).
#include <cstdio>
#include <memory>
#include <string>

#include "audio/audio_io.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "codec/codec_cli.h"
#include "codec/voice_writer.h"
#include "format/voice.h"
#include "util/error.h"

namespace drama::cli {

namespace {
struct VoiceArgs {
  CodecWeightsOptions codec;
  std::string audio, transcript, output;
};
}  // namespace

void register_voice(CLI::App& app, Runner& run) {
  auto* voice = app.add_subcommand("voice", "Write a voice file from reference audio");
  voice->require_subcommand(1);
  auto args = std::make_shared<VoiceArgs>();
  auto* write = voice->add_subcommand("write", "Reference audio + transcript -> voice file");
  write->add_option("REF_AUDIO", args->audio, "reference audio, WAV/FLAC, 1 to 60 s")->required();
  write->add_option("--transcript", args->transcript, "the words spoken in the reference")
      ->required();
  write->add_option("-o,--output", args->output, "voice file to write")->required();
  add_codec_weights_options(*write, args->codec);
  write->callback([&run, args, write] {
    run = [args, write] {
      if (!is_usable_transcript(args->transcript))
        throw UsageError("--transcript is empty or not valid UTF-8.");
      // Read and check the audio before loading the codec: refusals come fast.
      const DecodedAudio audio = read_audio_file(args->audio);
      CodecForCli loaded = load_codec_checked(*write, args->codec);
      LoadedCodec& lc = loaded.codec;
      const Voice v =
          make_voice_from_audio(*lc.model, audio, args->transcript, lc.num_codebooks, args->audio);
      write_voice(args->output, v);
      std::fprintf(stderr, "voice write: %lld frames -> %s\n", static_cast<long long>(v.frames),
                   args->output.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli

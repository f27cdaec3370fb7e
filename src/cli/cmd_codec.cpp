// `drama codec encode AUDIO -o CODES` and `drama codec decode CODES -o AUDIO` (interfaces.md):
// the codec on its own, with codes files in the "drama-codes/1" format (spec section 8).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "audio/audio_io.h"
#include "cli/commands.h"
#include "cli/weights_options.h"
#include "codec/codec_cli.h"
#include "codec/mimi.h"
#include "codec/voice_writer.h"
#include "format/voice.h"
#include "util/error.h"

namespace drama::cli {

namespace {

struct CodecArgs {
  CodecWeightsOptions codec;
  std::string input, output, format;
};

}  // namespace

void register_codec(CLI::App& app, Runner& run) {
  auto* codec = app.add_subcommand("codec", "Encode audio to codes or decode codes to audio");
  codec->require_subcommand(1);

  auto enc = std::make_shared<CodecArgs>();
  auto* encode = codec->add_subcommand("encode", "Audio (WAV/FLAC, any rate) -> codes file");
  encode->add_option("AUDIO", enc->input, "input audio")->required();
  encode->add_option("-o,--output", enc->output, "codes file to write")->required();
  add_codec_weights_options(*encode, enc->codec);
  encode->callback([&run, enc, encode] {
    run = [enc, encode] {
      CodecForCli loaded = load_codec_checked(*encode, enc->codec);
      LoadedCodec& lc = loaded.codec;
      const DecodedAudio audio = read_audio_file(enc->input);
      if (audio.mono.empty()) throw Error(enc->input + ": the audio holds no samples.");
      const std::vector<float> pcm =
          resample_audio(audio.mono, audio.sample_rate, lc.model->sample_rate());
      Voice codes;
      codes.codes = lc.model->encode(pcm, lc.num_codebooks);
      codes.num_codebooks = lc.num_codebooks;
      codes.frames = static_cast<int64_t>(codes.codes.size()) / lc.num_codebooks;
      codes.sample_rate = lc.model->sample_rate();
      codes.frame_rate = lc.model->frame_rate();
      codes.codec_sha256 = lc.model->codec_sha256();
      write_codes(enc->output, codes);
      std::fprintf(stderr, "codec encode: %lld frames x %lld codebooks -> %s\n",
                   static_cast<long long>(codes.frames), static_cast<long long>(lc.num_codebooks),
                   enc->output.c_str());
      return 0;
    };
  });

  auto dec = std::make_shared<CodecArgs>();
  auto* decode =
      codec->add_subcommand("decode", "Codes file -> audio (wav, flac, pcm, mp3 or opus)");
  decode->add_option("CODES", dec->input, "codes file (drama-codes/1)")->required();
  decode->add_option("-o,--output", dec->output, "audio file to write")->required();
  decode
      ->add_option("--format", dec->format,
                   "wav, flac, pcm, mp3 or opus (default: from the extension)")
      ->check(CLI::IsMember({"wav", "flac", "pcm", "mp3", "opus"}));
  add_codec_weights_options(*decode, dec->codec);
  decode->callback([&run, dec, decode] {
    run = [dec, decode] {
      const AudioFormat format = dec->format.empty()
                                     ? audio_format_from_path(dec->output)
                                     : audio_format_from_name(dec->format, "--format");
      const Voice codes = read_codes(dec->input);
      CodecForCli loaded = load_codec_checked(*decode, dec->codec, codes.num_codebooks);
      LoadedCodec& lc = loaded.codec;
      check_codes_match_codec(codes, *lc.model, lc.num_codebooks, dec->input);
      const std::vector<float> pcm =
          lc.model->decode(codes.codes, codes.frames, codes.num_codebooks);
      write_audio_file(dec->output, pcm, lc.model->sample_rate(), format);
      std::fprintf(stderr, "codec decode: %lld frames -> %s\n",
                   static_cast<long long>(codes.frames), dec->output.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli

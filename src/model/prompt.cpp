#include "model/prompt.h"

#include "model/text_frontend.h"
#include "util/error.h"

namespace drama {

std::vector<int32_t> text_tokens(const Drama3Config& config, const std::string& text) {
  std::string bytes;
  if (config.text.frontend == "bytes")
    bytes = text;
  else if (config.text.frontend == "espeak-ipa")
    bytes = espeak_ipa(text, config.text.language);
  else
    throw Error("config.json: text.frontend \"" + config.text.frontend + "\" is not supported");
  std::vector<int32_t> ids;
  ids.reserve(bytes.size());
  for (unsigned char c : bytes) ids.push_back(c);
  return ids;
}

namespace {
void append_text_segment(const Drama3Config& config, const std::string& text, Prompt& p) {
  PromptRun run;
  run.ids.push_back(config.text.bos_id);
  for (int32_t id : text_tokens(config, text)) run.ids.push_back(id);
  run.ids.push_back(config.text.eos_id);
  p.rows += static_cast<int64_t>(run.ids.size());
  p.runs.push_back(std::move(run));
}
}  // namespace

Prompt unconditional_prompt(const Drama3Config& config, const std::string& text) {
  Prompt p;
  append_text_segment(config, text, p);
  return p;
}

Prompt conditional_prompt(const Drama3Config& config, const std::string& text, const Voice& voice) {
  Prompt p;
  append_text_segment(config, voice.transcript, p);
  if (voice.frames > 0) {
    PromptRun audio;
    audio.audio = true;
    audio.ids = voice.codes;
    p.rows += voice.frames;
    p.runs.push_back(std::move(audio));
  }
  append_text_segment(config, text, p);
  return p;
}

void check_codes(const Drama3Config& config, const std::vector<int32_t>& codes,
                 const std::string& label) {
  for (size_t i = 0; i < codes.size(); ++i)
    if (codes[i] < 0 || codes[i] > config.audio.codebook_size)
      throw Error(label + ": code " + std::to_string(codes[i]) + " at frame " +
                  std::to_string(i / config.audio.num_codebooks) + " is outside [0, " +
                  std::to_string(config.audio.codebook_size) + "]");
}

void check_voice(const Drama3Config& config, const Voice& voice, const std::string& codec_sha256) {
  if (voice.num_codebooks != config.audio.num_codebooks)
    throw Error("voice has " + std::to_string(voice.num_codebooks) +
                " codebooks but the model uses " + std::to_string(config.audio.num_codebooks));
  if (static_cast<int64_t>(voice.codes.size()) != voice.frames * voice.num_codebooks)
    throw Error("voice codes hold " + std::to_string(voice.codes.size()) +
                " values, not frames x " + "codebooks");
  if (!codec_sha256.empty() && voice.codec_sha256 != codec_sha256)
    throw Error("voice was encoded with codec " + voice.codec_sha256 +
                " but the loaded codec/model.safetensors is " + codec_sha256 +
                "; re-create the voice with this model");
  check_codes(config, voice.codes, "voice");
}

}  // namespace drama

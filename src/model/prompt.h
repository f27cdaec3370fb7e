// Prompt layout (spec section 6): a segment is [bos, text bytes..., eos] followed by its audio
// frames. Conditional branch: segment(reference transcript, reference codes) + [bos, target, eos];
// unconditional branch: [bos, target, eos].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/voice.h"

namespace drama {

struct PromptRun {
  bool audio = false;
  std::vector<int32_t> ids;  // text: one token id per row; audio: num_codebooks codes per row
};

struct Prompt {
  std::vector<PromptRun> runs;
  int64_t rows = 0;
};

// Text token ids through the config's text.frontend (model/text_frontend.h): the UTF-8 bytes of
// the text ("bytes") or of its IPA ("espeak-ipa").
std::vector<int32_t> text_tokens(const Drama3Config& config, const std::string& text);

Prompt unconditional_prompt(const Drama3Config& config, const std::string& text);
Prompt conditional_prompt(const Drama3Config& config, const std::string& text, const Voice& voice);

// Refuses a voice whose codebook count differs from the model's, whose codes are out of range,
// or whose codec hash differs from `codec_sha256` (empty = no codec loaded: not checked).
void check_voice(const Drama3Config& config, const Voice& voice, const std::string& codec_sha256);

// Refuses codes outside [0, codebook_size] (the audio table has codebook_size + 1 rows per
// codebook); `label` names the source in the error.
void check_codes(const Drama3Config& config, const std::vector<int32_t>& codes,
                 const std::string& label);

}  // namespace drama

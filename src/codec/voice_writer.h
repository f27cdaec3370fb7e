// The voice writer (spec section 8, interfaces.md `drama voice write` and POST /v1/audio/voices):
// reference audio + transcript -> codes, with every refusal as one clear error. Also the check
// that a codes or voice file belongs to the loaded codec.
#pragma once

#include <cstdint>
#include <string>

#include "audio/audio_io.h"
#include "codec/mimi.h"
#include "format/voice.h"

namespace drama {

struct VoiceLimits {
  double min_seconds = 1.0;
  double max_seconds = 60.0;
  // Audio whose peak stays below this (about 3 steps of 16-bit audio, -80 dBFS) is silence.
  float silence_peak = 1e-4f;
};

// Refuses (drama::Error naming `label`) an empty or invalid-UTF-8 transcript, audio with no
// samples, silence only, or a duration outside the limits; otherwise downmixed audio is
// resampled to the codec rate and encoded to `num_codebooks` codebooks.
Voice make_voice_from_audio(const MimiModel& codec, const DecodedAudio& audio,
                            const std::string& transcript, int64_t num_codebooks,
                            const std::string& label, const VoiceLimits& limits = {});

// Refuses codes made with another codec (codec_sha256), another codebook count than
// `num_codebooks`, another sample/frame rate, or codes outside the codebooks.
void check_codes_match_codec(const Voice& codes, const MimiModel& codec, int64_t num_codebooks,
                             const std::string& label);

// True when `text` is valid UTF-8 with at least one non-whitespace character.
bool is_usable_transcript(const std::string& text);

}  // namespace drama

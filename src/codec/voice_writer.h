// The voice writer (spec section 8, interfaces.md `drama voice write` and POST /v1/audio/voices):
// reference audio + transcript -> codes, with every refusal as one clear error. Also the check
// that a codes or voice file belongs to the loaded codec.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "audio/audio_io.h"
#include "codec/mimi.h"
#include "format/voice.h"

namespace drama {

// Refuses (drama::Error naming `label`) an empty or invalid-UTF-8 transcript, audio with no
// samples, or a reference outside rules::check_reference (silent, or not 1 to 60 s: the same
// rule the server applies); otherwise downmixed audio is resampled to the codec rate and encoded
// to `num_codebooks` codebooks.
Voice make_voice_from_audio(const MimiModel& codec, const DecodedAudio& audio,
                            const std::string& transcript, int64_t num_codebooks,
                            const std::string& label);

// The peak absolute sample (0 for no samples).
float peak_of(std::span<const float> pcm);

// Refuses codes made with another codec (codec_sha256), another codebook count than
// `num_codebooks`, another sample/frame rate, or codes outside the codebooks.
void check_codes_match_codec(const Voice& codes, const MimiModel& codec, int64_t num_codebooks,
                             const std::string& label);

// True when `text` is valid UTF-8 with at least one non-whitespace character.
bool is_usable_transcript(const std::string& text);

}  // namespace drama

#include "codec/voice_writer.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "util/error.h"
#include "util/request_rules.h"

namespace drama {

namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80         ? 0
                      : (c >> 5) == 6  ? 1
                      : (c >> 4) == 14 ? 2
                      : (c >> 3) == 30 ? 3
                                       : -1;
    if (extra < 0 || i + static_cast<size_t>(extra) >= s.size() + (extra == 0 ? 1 : 0))
      return false;
    uint32_t cp = extra == 0 ? c : c & (0x3fu >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) ||
        (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

}  // namespace

bool is_usable_transcript(const std::string& text) {
  if (!valid_utf8(text)) return false;
  for (char ch : text)
    if (!std::isspace(static_cast<unsigned char>(ch))) return true;
  return false;
}

float peak_of(std::span<const float> pcm) {
  float peak = 0.0f;
  for (float v : pcm) peak = std::max(peak, std::fabs(v));
  return peak;
}

Voice make_voice_from_audio(const MimiModel& codec, const DecodedAudio& audio,
                            const std::string& transcript, int64_t num_codebooks,
                            const std::string& label) {
  if (!is_usable_transcript(transcript))
    throw Error("The transcript is empty or not valid UTF-8; a voice needs the words of " + label +
                ".");
  if (audio.mono.empty()) throw Error(label + ": the audio holds no samples.");
  try {
    rules::check_reference(audio.seconds(), peak_of(audio.mono), label + ":");
  } catch (const rules::RuleError& e) {
    throw Error(e.what());  // a bad file is a runtime failure of `voice write` (exit 1)
  }
  const std::vector<float> pcm = resample_audio(audio.mono, audio.sample_rate, codec.sample_rate());
  Voice v;
  v.codes = codec.encode(pcm, num_codebooks);
  v.num_codebooks = num_codebooks;
  v.frames = static_cast<int64_t>(v.codes.size()) / num_codebooks;
  v.transcript = transcript;
  v.sample_rate = codec.sample_rate();
  v.frame_rate = codec.frame_rate();
  v.codec_sha256 = codec.codec_sha256();
  return v;
}

void check_codes_match_codec(const Voice& codes, const MimiModel& codec, int64_t num_codebooks,
                             const std::string& label) {
  if (codes.codec_sha256 != codec.codec_sha256())
    throw Error(label + " was made with another codec (codec_sha256 " + codes.codec_sha256 +
                ", the loaded codec is " + codec.codec_sha256() + ").");
  if (codes.num_codebooks != num_codebooks)
    throw Error(label + " has " + std::to_string(codes.num_codebooks) +
                " codebooks; the model uses " + std::to_string(num_codebooks) + ".");
  if (codes.sample_rate != codec.sample_rate() || codes.frame_rate != codec.frame_rate())
    throw Error(label + ": its sample or frame rate differs from the codec's.");
  check_mimi_codes(codec, codes.codes, codes.frames, codes.num_codebooks, label);
}

}  // namespace drama

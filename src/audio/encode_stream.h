// Encoders that take audio as it is generated and hand back bytes as soon as they exist: the
// streamed WAV (one header of unknown length), raw s16le, MP3 (libmp3lame) and Ogg Opus
// (libopusenc). The same samples pushed in the same pieces give the same bytes, so the server's
// whole and streamed replies of one request are identical. 16-bit samples (float_to_s16) feed
// every encoder, as they feed WAV and FLAC.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "audio/audio_io.h"

namespace drama {

class AudioStreamEncoder {
 public:
  virtual ~AudioStreamEncoder() = default;
  // Appends the bytes these samples complete (possibly none: encoders buffer a frame or a page).
  virtual void push(std::span<const float> pcm, std::vector<uint8_t>& out) = 0;
  // Appends the rest; the stream is complete afterwards and takes no more samples.
  virtual void finish(std::vector<uint8_t>& out) = 0;
};

// Wav (the streaming header first), Pcm, Mp3 and Opus. Flac is not streamed (UsageError).
std::unique_ptr<AudioStreamEncoder> make_stream_encoder(AudioFormat format, int64_t sample_rate);

// MP3: MPEG Layer III, mono, constant 64 kbit/s, no ID3 or Xing/LAME tag (nothing is rewritten
// at the end, so a stream and a file are the same bytes). Opus: Ogg Opus (RFC 7845), 48 kbit/s,
// a fixed stream serial number (repeatable bytes), pages flushed every 100 ms of audio.
std::unique_ptr<AudioStreamEncoder> make_mp3_encoder(int64_t sample_rate);
std::unique_ptr<AudioStreamEncoder> make_opus_encoder(int64_t sample_rate);

}  // namespace drama

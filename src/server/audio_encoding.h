// Audio bytes for HTTP replies: s16 conversion, WAV headers (sized, or streamed with unknown
// length 0xFFFFFFFF), FLAC through libsndfile's virtual I/O, and decoding of uploaded reference
// audio (WAV/FLAC, any rate/channels -> mono at the codec rate).
// TODO(dedup): move to src/audio/ once that module provides the same writers/readers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace drama::server {

// float [-1, 1] -> s16 little-endian: clamp(lrint(x * 32767), -32768, 32767), appended to `out`.
void append_s16le(std::span<const float> pcm, std::string& out);

// 44-byte PCM s16 mono WAV header. data_bytes = 0xFFFFFFFF (and RIFF size likewise) for a stream.
std::string wav_header(int64_t sample_rate, uint32_t data_bytes);
inline constexpr uint32_t kUnknownWavSize = 0xFFFFFFFFu;

// A whole FLAC file (16-bit mono) of `pcm`.
std::string encode_flac(std::span<const float> pcm, int64_t sample_rate);

// Decodes WAV or FLAC bytes, downmixes to mono and resamples to `target_rate`. Throws
// drama::Error naming `label` when the bytes are not readable audio.
std::vector<float> decode_audio(std::span<const uint8_t> bytes, int64_t target_rate,
                                const std::string& label);

}  // namespace drama::server

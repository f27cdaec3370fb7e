// Audio in and out (interfaces.md): WAV/FLAC reading through libsndfile (files or memory),
// downmix to mono, resampling to the codec rate with libsoxr, and WAV/FLAC/raw s16le writing,
// including the one-header streamed WAV whose sizes are unknown (0xFFFFFFFF).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace drama {

struct DecodedAudio {
  std::vector<float> mono;  // channels averaged, libsndfile's normalised float scale
  int64_t sample_rate = 0;
  int64_t channels = 0;
  double seconds() const {
    return sample_rate > 0 ? static_cast<double>(mono.size()) / static_cast<double>(sample_rate)
                           : 0.0;
  }
};

// Reads any file libsndfile understands (WAV, FLAC, ...). Throws drama::Error naming `label`
// (or the path) for unreadable, non-audio or truncated input.
DecodedAudio read_audio_file(const std::filesystem::path& path);
DecodedAudio read_audio_memory(std::span<const uint8_t> bytes, const std::string& label);

// Resamples mono float audio with libsoxr (high quality, one thread, so results are repeatable).
// Returns the input unchanged when the rates are equal.
std::vector<float> resample_audio(std::span<const float> x, int64_t from_rate, int64_t to_rate);

enum class AudioFormat { Wav, Flac, Pcm, Mp3, Opus };

// "wav", "flac", "pcm" (also "raw"), "mp3", "opus"; anything else is a UsageError naming `what`.
AudioFormat audio_format_from_name(const std::string& name, const std::string& what);
// From a file extension (.wav .flac .pcm .raw .mp3 .opus); throws UsageError otherwise.
AudioFormat audio_format_from_path(const std::filesystem::path& path);
// audio/wav, audio/flac, audio/pcm, audio/mpeg, audio/ogg
const char* audio_content_type(AudioFormat format);

// float -> 16-bit: clamp(lrint(x * 32767), -32768, 32767); NaN becomes 0.
int16_t float_to_s16(float x);
void append_s16le(std::span<const float> pcm, std::vector<uint8_t>& out);

// A 44-byte 16-bit mono PCM WAV header. `samples` < 0 writes the streaming form: RIFF and data
// sizes 0xFFFFFFFF (unknown length), so players can start at once.
std::vector<uint8_t> wav_header(int64_t sample_rate, int64_t samples);
inline std::vector<uint8_t> streaming_wav_header(int64_t sample_rate) {
  return wav_header(sample_rate, -1);
}

// A whole file in `format` (16-bit mono; MP3 and Opus through encode_stream.h's encoders).
std::vector<uint8_t> encode_audio(std::span<const float> pcm, int64_t sample_rate,
                                  AudioFormat format);
// Writes atomically (nothing is left behind on failure).
void write_audio_file(const std::filesystem::path& path, std::span<const float> pcm,
                      int64_t sample_rate, AudioFormat format);

}  // namespace drama

// POST /v1/audio/speech body: parsing and validation (interfaces.md, HTTP). Strict: unknown
// fields, wrong types and out-of-range values are refused with ApiError 400 naming the field;
// nothing is silently ignored. Pure (no engine, no I/O) so it can be fuzzed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "audio/audio_io.h"
#include "backend/backend.h"
#include "format/voice.h"
#include "util/request_rules.h"

namespace drama::server {

enum class StreamMode { None, Audio, Sse };

// What the loaded model and the server's launch options allow.
struct SpeechPolicy {
  std::string model_name;      // the loaded model's id; kOpenAiModelAliases name it too
  bool request_gamma = false;  // --request-gamma: a request may set cfg_scale
  float server_gamma = 1.5f;
  SamplingParams default_sampling;
};

struct SpeechFields {
  std::string input;
  std::optional<std::string> voice_id;
  std::optional<std::string> ref_audio_base64;  // with ref_text: a one-off reference
  std::string ref_text;
  AudioFormat format = AudioFormat::Wav;
  StreamMode stream = StreamMode::None;
  std::optional<uint64_t> seed;  // absent: the server draws one and echoes it
  SamplingParams sampling;
  float gamma = 1.5f;
  double max_duration_s = 60.0;
  double speed = 1.0;  // 1: the audio is not touched
};

// OpenAI's speech model names, accepted as names of whatever model is loaded.
inline constexpr const char* kOpenAiModelAliases[] = {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"};
// True for the loaded model's id and for each of kOpenAiModelAliases.
bool names_loaded_model(std::string_view model, std::string_view loaded);

// Limits: util/request_rules.h (shared with the command line); documented in docs/server.md.
inline constexpr size_t kMaxInputCharacters = rules::kMaxInputCharacters;
inline constexpr double kMaxDurationSeconds = rules::kMaxDurationSeconds;

// Throws ApiError (400) for anything malformed.
SpeechFields parse_speech_request(std::string_view body, const SpeechPolicy& policy);

// [A-Za-z0-9_-]{1,64} (format/voice.h: the same rule for a checkpoint's built-in voices).
using drama::is_valid_voice_id;

// Number of Unicode code points, or nullopt when `text` is not valid UTF-8.
std::optional<size_t> utf8_length(std::string_view text);

}  // namespace drama::server

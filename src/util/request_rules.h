// The limits a speech request obeys, in one place for the command line (`drama say`,
// `drama voice write`) and the HTTP server (POST /v1/audio/speech, POST /v1/audio/voices, inline
// ref_audio). Each check throws RuleError naming the argument as the caller spells it
// (`--top-p` or 'top_p') with the same rule text, so both paths give the same answer.
#pragma once

#include <cstdint>
#include <string>

#include "util/error.h"

namespace drama::rules {

inline constexpr size_t kMaxInputCharacters = 4096;
inline constexpr double kMaxDurationSeconds = 60.0;
inline constexpr double kMinTemperature = 0.0;
inline constexpr double kMaxTemperature = 2.0;
inline constexpr int64_t kMaxTopK = 100000;
inline constexpr double kMaxGamma = 10.0;
inline constexpr double kMinSpeed = 0.25;  // OpenAI's range
inline constexpr double kMaxSpeed = 4.0;
inline constexpr double kMinReferenceSeconds = 1.0;
inline constexpr double kMaxReferenceSeconds = 60.0;
// A reference whose peak stays below this (about 3 steps of 16-bit audio, -80 dBFS) is silence.
inline constexpr float kSilencePeak = 1e-4f;

// A request value outside its rule. `field` is the HTTP field name ("top_p"); the message names
// the argument as the caller spelled it.
class RuleError : public UsageError {
 public:
  RuleError(std::string field, const std::string& message)
      : UsageError(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// `label` is how the caller names the argument: "--temperature" or "'temperature'".
void check_temperature(double t, const std::string& label);   // [0, 2]; 0 = greedy
void check_top_k(int64_t k, const std::string& label);        // [0, 100000]; 0 = off
void check_top_p(double p, const std::string& label);         // (0, 1]
void check_gamma(double g, const std::string& label);         // [0, 10]; 1 = no guidance
void check_speed(double s, const std::string& label);         // [0.25, 4]
void check_max_duration(double s, const std::string& label);  // (0, 60]
// Reference audio for the voice writer: not silent, 1 to 60 s long. `label` names the audio.
void check_reference(double seconds, float peak, const std::string& label);

}  // namespace drama::rules

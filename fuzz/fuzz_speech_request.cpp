// libFuzzer target: the /v1/audio/speech body parser and validator. Any input must either parse
// into fields that satisfy the documented limits or be refused with ApiError 400; nothing else.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/api_error.h"
#include "server/speech_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace drama::server;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  for (bool request_gamma : {false, true}) {
    SpeechPolicy policy{"drama-mini", request_gamma, 1.5f, {0.9f, 50, 1.0f}};
    try {
      SpeechFields f = parse_speech_request(body, policy);
      auto chars = utf8_length(f.input);
      if (!chars || *chars == 0 || *chars > kMaxInputCharacters) std::abort();
      if (f.voice_id && !is_valid_voice_id(*f.voice_id)) std::abort();
      if (!(f.max_duration_s > 0 && f.max_duration_s <= kMaxDurationSeconds)) std::abort();
      if (!(f.sampling.top_p > 0 && f.sampling.top_p <= 1)) std::abort();
      if (!request_gamma && f.gamma != 1.5f) std::abort();
    } catch (const ApiError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  return 0;
}

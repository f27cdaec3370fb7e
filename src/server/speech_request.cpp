// Validation of the speech request body, field by field as in interfaces.md.
#include "server/speech_request.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace drama::server {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& field, const std::string& code,
                      const std::string& message) {
  throw ApiError(400, code, message, field);
}

// null counts as absent: OpenAI client libraries send explicit nulls for unset options.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string get_string(const json& v, const char* name) {
  if (!v.is_string()) bad(name, "invalid_type", std::string("'") + name + "' must be a string");
  return v.get<std::string>();
}

double get_number(const json& v, const char* name) {
  if (!v.is_number()) bad(name, "invalid_type", std::string("'") + name + "' must be a number");
  double x = v.get<double>();
  if (!std::isfinite(x)) bad(name, "invalid_value", std::string("'") + name + "' must be finite");
  return x;
}

const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {
      "input",         "voice",  "ref_audio",      "ref_text",     "model", "response_format",
      "stream_format", "stream", "speed",          "instructions", "seed",  "temperature",
      "top_k",         "top_p",  "max_duration_s", "cfg_scale"};
  return k;
}

void parse_voice(const json& v, SpeechFields& out) {
  std::string id;
  if (v.is_string()) {
    id = v.get<std::string>();
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() != "id")
        bad("voice", "unknown_field",
            "'voice' object has unknown field '" + it.key() + "' (only 'id')");
    }
    auto it = v.find("id");
    if (it == v.end() || !it->is_string())
      bad("voice", "invalid_type", "'voice.id' must be a string");
    id = it->get<std::string>();
  } else {
    bad("voice", "invalid_type", "'voice' must be a voice id string or {\"id\": ...}");
  }
  if (!is_valid_voice_id(id)) {
    bad("voice", "invalid_voice_id",
        "'voice' must be a voice id of 1 to 64 characters from [A-Za-z0-9_-]");
  }
  out.voice_id = id;
}

void parse_format(const json& v, SpeechFields& out) {
  std::string f = get_string(v, "response_format");
  if (f == "wav")
    out.format = AudioFormat::Wav;
  else if (f == "pcm")
    out.format = AudioFormat::Pcm;
  else if (f == "flac")
    out.format = AudioFormat::Flac;
  else if (f == "mp3")
    out.format = AudioFormat::Mp3;
  else if (f == "opus")
    out.format = AudioFormat::Opus;
  else if (f == "aac")  // docs/decisions.md: no well-kept AAC encoder in Debian main
    bad("response_format", "unsupported_format",
        "'response_format' aac is not supported; use mp3, opus, wav, pcm or flac");
  else
    bad("response_format", "invalid_value",
        "'response_format' must be wav, pcm, flac, mp3 or opus");
}

// A shared rule (util/request_rules.h) as a 400 naming the field.
template <typename F>
void apply_rule(F&& check) {
  try {
    check();
  } catch (const rules::RuleError& e) {
    bad(e.field(), "invalid_value", e.what());
  }
}

}  // namespace

bool names_loaded_model(std::string_view model, std::string_view loaded) {
  if (model == loaded) return true;
  for (const char* alias : kOpenAiModelAliases)
    if (model == alias) return true;
  return false;
}

std::optional<size_t> utf8_length(std::string_view text) {
  size_t count = 0;
  size_t i = 0;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  while (i < text.size()) {
    unsigned char c = s[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      n = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else
      return std::nullopt;
    if (i + n > text.size()) return std::nullopt;
    for (size_t j = 1; j < n; ++j) {
      if ((s[i + j] & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
    i += n;
    ++count;
  }
  return count;
}

SpeechFields parse_speech_request(std::string_view body, const SpeechPolicy& policy) {
  // Checked before parsing so that a bad byte anywhere gets its own clear refusal.
  if (!utf8_length(body)) throw ApiError(400, "invalid_utf8", "request body is not valid UTF-8");
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "invalid_json", "request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "invalid_json", "request body must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!known_fields().count(it.key())) {
      bad(it.key(), "unknown_field", "unknown field '" + it.key() + "'");
    }
  }

  SpeechFields out;
  out.sampling = policy.default_sampling;
  out.gamma = policy.server_gamma;

  const json* v = field(j, "input");
  if (!v) bad("input", "missing_field", "'input' is required");
  out.input = get_string(*v, "input");
  auto chars = utf8_length(out.input);
  if (!chars) bad("input", "invalid_utf8", "'input' is not valid UTF-8");
  if (*chars == 0) bad("input", "empty_input", "'input' must not be empty");
  if (*chars > kMaxInputCharacters)
    bad("input", "input_too_long", "'input' is longer than 4096 characters");

  if ((v = field(j, "voice"))) parse_voice(*v, out);
  const json* ref_audio = field(j, "ref_audio");
  const json* ref_text = field(j, "ref_text");
  if (bool(ref_audio) != bool(ref_text)) {
    bad(ref_audio ? "ref_text" : "ref_audio", "missing_field",
        "'ref_audio' and 'ref_text' must be given together");
  }
  if (ref_audio) {
    if (out.voice_id)
      bad("ref_audio", "conflicting_fields", "give either 'voice' or 'ref_audio', not both");
    out.ref_audio_base64 = get_string(*ref_audio, "ref_audio");
    out.ref_text = get_string(*ref_text, "ref_text");
    if (out.ref_audio_base64->empty())
      bad("ref_audio", "invalid_value", "'ref_audio' must not be empty");
    if (out.ref_text.empty()) bad("ref_text", "invalid_value", "'ref_text' must not be empty");
  }

  if ((v = field(j, "model"))) {
    std::string m = get_string(*v, "model");
    if (!names_loaded_model(m, policy.model_name))
      bad("model", "model_not_found",
          "'model' " + m + " is not the loaded model (" + policy.model_name +
              "; tts-1, tts-1-hd and gpt-4o-mini-tts also name it)");
  }
  if ((v = field(j, "response_format"))) parse_format(*v, out);

  if ((v = field(j, "stream"))) {
    if (!v->is_boolean()) bad("stream", "invalid_type", "'stream' must be a boolean");
    if (v->get<bool>()) out.stream = StreamMode::Audio;
  }
  // stream_format, when present, decides; `stream` is only the de-facto alias for "audio".
  if ((v = field(j, "stream_format"))) {
    std::string s = get_string(*v, "stream_format");
    if (s == "audio")
      out.stream = StreamMode::Audio;
    else if (s == "sse")
      out.stream = StreamMode::Sse;
    else
      bad("stream_format", "invalid_value", "'stream_format' must be audio or sse");
  }
  if (out.stream != StreamMode::None && out.format == AudioFormat::Flac) {
    bad("response_format", "unsupported_format",
        "flac cannot be streamed; use wav, pcm, mp3 or opus");
  }

  if ((v = field(j, "speed"))) {
    double speed = get_number(*v, "speed");
    apply_rule([&] { rules::check_speed(speed, "'speed'"); });
    out.speed = speed;
  }
  if ((v = field(j, "instructions"))) {
    if (!get_string(*v, "instructions").empty())
      bad("instructions", "unsupported_value", "'instructions' is not supported by Drama-3");
  }
  if ((v = field(j, "seed"))) {
    if (!v->is_number_integer()) bad("seed", "invalid_type", "'seed' must be an integer");
    if (!v->is_number_unsigned())
      bad("seed", "invalid_value", "'seed' must be a non-negative integer below 2^64");
    out.seed = v->get<uint64_t>();
  }
  if ((v = field(j, "temperature"))) {
    double t = get_number(*v, "temperature");
    apply_rule([&] { rules::check_temperature(t, "'temperature'"); });
    out.sampling.temperature = float(t);
  }
  if ((v = field(j, "top_k"))) {
    if (!v->is_number_integer()) bad("top_k", "invalid_type", "'top_k' must be an integer");
    if (!v->is_number_unsigned() || v->get<uint64_t>() > uint64_t(rules::kMaxTopK))
      apply_rule([&] { rules::check_top_k(-1, "'top_k'"); });
    out.sampling.top_k = int32_t(v->get<uint64_t>());
  }
  if ((v = field(j, "top_p"))) {
    double p = get_number(*v, "top_p");
    apply_rule([&] { rules::check_top_p(p, "'top_p'"); });
    out.sampling.top_p = float(p);
  }
  if ((v = field(j, "max_duration_s"))) {
    double d = get_number(*v, "max_duration_s");
    apply_rule([&] { rules::check_max_duration(d, "'max_duration_s'"); });
    out.max_duration_s = d;
  }
  if ((v = field(j, "cfg_scale"))) {
    if (!policy.request_gamma)
      bad("cfg_scale", "guidance_not_allowed",
          "'cfg_scale' is not allowed: this server was started without --request-gamma");
    double g = get_number(*v, "cfg_scale");
    apply_rule([&] { rules::check_gamma(g, "'cfg_scale'"); });
    out.gamma = float(g);
  }
  return out;
}

}  // namespace drama::server

// Validation of the /v1/audio/speech body (interfaces.md): every refusal, and the accepted forms.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/base64.h"
#include "server/speech_request.h"

namespace drama::server {
namespace {

SpeechPolicy policy(bool request_gamma = false) {
  return SpeechPolicy{"drama-mini", request_gamma, 1.5f, SamplingParams{0.9f, 50, 1.0f}};
}

struct Refusal {
  const char* body;
  const char* code;
  const char* param;  // "" = null
};

class SpeechRequestRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(SpeechRequestRefusal, IsRefusedWith400NamingTheField) {
  const Refusal& r = GetParam();
  try {
    parse_speech_request(r.body, policy());
    FAIL() << "accepted: " << r.body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << r.body;
    EXPECT_EQ(e.code(), r.code) << r.body;
    if (*r.param) {
      ASSERT_TRUE(e.param().has_value()) << r.body;
      EXPECT_EQ(*e.param(), r.param) << r.body;
    }
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

const Refusal kRefusals[] = {
    {"", "invalid_json", ""},
    {"{", "invalid_json", ""},
    {"[1,2]", "invalid_json", ""},
    {"\"text\"", "invalid_json", ""},
    {"{\"input\": \"a\xff\"}", "invalid_utf8", ""},
    {R"({"input": "\ud800"})", "invalid_json", ""},
    {R"({})", "missing_field", "input"},
    {R"({"input": ""})", "empty_input", "input"},
    {R"({"input": 5})", "invalid_type", "input"},
    {R"({"input": "hi", "colour": "red"})", "unknown_field", "colour"},
    {R"({"input": "hi", "voice": "../etc/passwd"})", "invalid_voice_id", "voice"},
    {R"({"input": "hi", "voice": "a/b"})", "invalid_voice_id", "voice"},
    {R"({"input": "hi", "voice": ""})", "invalid_voice_id", "voice"},
    {R"({"input": "hi", "voice": 3})", "invalid_type", "voice"},
    {R"({"input": "hi", "voice": {"id": "a", "x": 1}})", "unknown_field", "voice"},
    {R"({"input": "hi", "voice": {"name": "a"}})", "unknown_field", "voice"},
    {R"({"input": "hi", "ref_audio": "AAAA"})", "missing_field", "ref_text"},
    {R"({"input": "hi", "ref_text": "words"})", "missing_field", "ref_audio"},
    {R"({"input": "hi", "voice": "v", "ref_audio": "AAAA", "ref_text": "t"})", "conflicting_fields",
     "ref_audio"},
    {R"({"input": "hi", "model": "whisper-1"})", "model_not_found", "model"},
    {R"({"input": "hi", "response_format": "ogg"})", "invalid_value", "response_format"},
    {R"({"input": "hi", "response_format": "ogg"})", "invalid_value", "response_format"},
    {R"({"input": "hi", "response_format": "flac", "stream": true})", "unsupported_format",
     "response_format"},
    {R"({"input": "hi", "stream_format": "chunks"})", "invalid_value", "stream_format"},
    {R"({"input": "hi", "stream": "yes"})", "invalid_type", "stream"},
    {R"({"input": "hi", "speed": 0.1})", "invalid_value", "speed"},
    {R"({"input": "hi", "speed": 5})", "invalid_value", "speed"},
    {R"({"input": "hi", "speed": 0.2499})", "invalid_value", "speed"},
    {R"({"input": "hi", "model": "tts-2"})", "model_not_found", "model"},
    {R"({"input": "hi", "speed": "fast"})", "invalid_type", "speed"},
    {R"({"input": "hi", "instructions": "whisper"})", "unsupported_value", "instructions"},
    {R"({"input": "hi", "seed": -1})", "invalid_value", "seed"},
    {R"({"input": "hi", "seed": 1.5})", "invalid_type", "seed"},
    {R"({"input": "hi", "seed": 18446744073709551616})", "invalid_type", "seed"},
    {R"({"input": "hi", "temperature": -0.1})", "invalid_value", "temperature"},
    {R"({"input": "hi", "temperature": 2.5})", "invalid_value", "temperature"},
    {R"({"input": "hi", "top_k": -1})", "invalid_value", "top_k"},
    {R"({"input": "hi", "top_k": 2.5})", "invalid_type", "top_k"},
    {R"({"input": "hi", "top_p": 0})", "invalid_value", "top_p"},
    {R"({"input": "hi", "top_p": 1.5})", "invalid_value", "top_p"},
    {R"({"input": "hi", "max_duration_s": 0})", "invalid_value", "max_duration_s"},
    {R"({"input": "hi", "max_duration_s": 61})", "invalid_value", "max_duration_s"},
    {R"({"input": "hi", "cfg_scale": 2})", "guidance_not_allowed", "cfg_scale"},
};

INSTANTIATE_TEST_SUITE_P(All, SpeechRequestRefusal, ::testing::ValuesIn(kRefusals));

TEST(SpeechRequest, TooLongInputIsRefused) {
  std::string body = R"({"input": ")" + std::string(4097, 'a') + "\"}";
  try {
    parse_speech_request(body, policy());
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "input_too_long");
  }
  // 4096 characters of 3-byte UTF-8 is within the limit: characters, not bytes, are counted.
  std::string ok = R"({"input": ")";
  for (int i = 0; i < 4096; ++i) ok += "\xe2\x82\xac";
  ok += "\"}";
  EXPECT_EQ(utf8_length(parse_speech_request(ok, policy()).input), 4096u);
}

TEST(SpeechRequest, DefaultsComeFromThePolicy) {
  SpeechFields f = parse_speech_request(R"({"input": "hello"})", policy());
  EXPECT_EQ(f.input, "hello");
  EXPECT_FALSE(f.voice_id);
  EXPECT_FALSE(f.seed);
  EXPECT_EQ(f.format, AudioFormat::Wav);
  EXPECT_EQ(f.stream, StreamMode::None);
  EXPECT_FLOAT_EQ(f.gamma, 1.5f);
  EXPECT_FLOAT_EQ(f.sampling.temperature, 0.9f);
  EXPECT_EQ(f.sampling.top_k, 50);
  EXPECT_DOUBLE_EQ(f.max_duration_s, 60.0);
}

TEST(SpeechRequest, AcceptsEveryDocumentedField) {
  auto f = parse_speech_request(
      R"({"input": "hi", "voice": {"id": "alice_1"}, "model": "drama-mini",
          "response_format": "pcm", "stream_format": "sse", "speed": 1.0, "instructions": "",
          "seed": 18446744073709551615, "temperature": 0, "top_k": 0, "top_p": 0.5,
          "max_duration_s": 2.5, "cfg_scale": 2})",
      policy(/*request_gamma=*/true));
  EXPECT_EQ(*f.voice_id, "alice_1");
  EXPECT_EQ(f.format, AudioFormat::Pcm);
  EXPECT_EQ(f.stream, StreamMode::Sse);
  EXPECT_EQ(*f.seed, 18446744073709551615ull);
  EXPECT_FLOAT_EQ(f.sampling.temperature, 0.0f);
  EXPECT_EQ(f.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(f.sampling.top_p, 0.5f);
  EXPECT_DOUBLE_EQ(f.max_duration_s, 2.5);
  EXPECT_FLOAT_EQ(f.gamma, 2.0f);
}

TEST(SpeechRequest, StreamIsAnAliasAndNullsAreAbsent) {
  EXPECT_EQ(parse_speech_request(R"({"input": "a", "stream": true})", policy()).stream,
            StreamMode::Audio);
  EXPECT_EQ(parse_speech_request(R"({"input": "a", "stream": false})", policy()).stream,
            StreamMode::None);
  EXPECT_EQ(
      parse_speech_request(R"({"input": "a", "stream": true, "stream_format": "sse"})", policy())
          .stream,
      StreamMode::Sse);
  auto f = parse_speech_request(R"({"input": "a", "voice": null, "seed": null, "speed": null})",
                                policy());
  EXPECT_FALSE(f.voice_id);
  EXPECT_FALSE(f.seed);
  auto g =
      parse_speech_request(R"({"input": "a", "ref_audio": "AAAA", "ref_text": "t"})", policy());
  EXPECT_EQ(*g.ref_audio_base64, "AAAA");
  EXPECT_EQ(g.ref_text, "t");
}

TEST(SpeechRequest, OpenAiModelNamesFormatsAndSpeedAreAccepted) {
  for (const char* m : {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "drama-mini"}) {
    std::string body = std::string(R"({"input": "a", "model": ")") + m + "\"}";
    EXPECT_NO_THROW(parse_speech_request(body, policy())) << m;
  }
  auto mp3 = parse_speech_request(
      R"({"input": "a", "response_format": "mp3", "stream_format": "audio"})", policy());
  EXPECT_EQ(mp3.format, AudioFormat::Mp3);
  auto opus = parse_speech_request(R"({"input": "a", "response_format": "opus"})", policy());
  EXPECT_EQ(opus.format, AudioFormat::Opus);
  for (double speed : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    std::string body = R"({"input": "a", "speed": )" + std::to_string(speed) + "}";
    EXPECT_DOUBLE_EQ(parse_speech_request(body, policy()).speed, speed);
  }
  EXPECT_DOUBLE_EQ(parse_speech_request(R"({"input": "a"})", policy()).speed, 1.0);
}

TEST(SpeechRequest, RequestGammaRangeIsChecked) {
  EXPECT_THROW(parse_speech_request(R"({"input": "a", "cfg_scale": 11})", policy(true)), ApiError);
  EXPECT_THROW(parse_speech_request(R"({"input": "a", "cfg_scale": -1})", policy(true)), ApiError);
  EXPECT_FLOAT_EQ(parse_speech_request(R"({"input": "a", "cfg_scale": 1})", policy(true)).gamma,
                  1.0f);
}

TEST(VoiceId, OnlyTheSafeAlphabet) {
  EXPECT_TRUE(is_valid_voice_id("a"));
  EXPECT_TRUE(is_valid_voice_id(std::string(64, 'z')));
  EXPECT_TRUE(is_valid_voice_id("Alice_2-b"));
  for (const char* bad : {"", ".", "..", "a/b", "a\\b", "a b", "a.voice", "é", "a\n"}) {
    EXPECT_FALSE(is_valid_voice_id(bad)) << bad;
  }
  EXPECT_FALSE(is_valid_voice_id(std::string(65, 'z')));
}

TEST(Utf8, RejectsMalformedSequences) {
  EXPECT_EQ(utf8_length("h\xc3\xa9llo"), 5u);
  EXPECT_EQ(utf8_length("\xf0\x9f\x98\x80"), 1u);
  EXPECT_FALSE(utf8_length("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(utf8_length("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8_length("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(utf8_length("\xe2\x82"));          // truncated
  EXPECT_FALSE(utf8_length("\x80"));
}

TEST(Base64, RoundTripsAndRejectsNonCanonical) {
  for (size_t n = 0; n < 10; ++n) {
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i < n; ++i) bytes.push_back(uint8_t(i * 37 + 1));
    auto enc = base64_encode(bytes);
    EXPECT_EQ(enc.size() % 4, 0u);
    EXPECT_EQ(base64_decode(enc), bytes);
  }
  EXPECT_EQ(base64_encode(std::vector<uint8_t>{'M', 'a', 'n'}), "TWFu");
  EXPECT_FALSE(base64_decode("abc"));
  EXPECT_FALSE(base64_decode("ab!="));
  EXPECT_FALSE(base64_decode("a=bc"));
}

}  // namespace
}  // namespace drama::server

// Voice and codes files (spec section 8): round trips and every refusal of a malformed file.
#include <gtest/gtest.h>

#include "format/safetensors.h"
#include "format/voice.h"
#include "util/error.h"

namespace drama {
namespace {

Voice sample_voice() {
  Voice v;
  v.frames = 3;
  v.num_codebooks = 2;
  v.codes = {1, 2, 3, 4, 5, 2047};
  v.transcript = "Hello, wörld.";
  v.sample_rate = 24000;
  v.frame_rate = 12.5;
  v.codec_sha256 = std::string(64, 'a');
  return v;
}

// A file with the given metadata and one tensor, to plant faults.
std::vector<uint8_t> craft(std::map<std::string, std::string> meta, DType dtype,
                           std::vector<int64_t> shape, std::vector<int32_t> values,
                           const std::string& name = "codes") {
  SafetensorsWriter w;
  if (dtype == DType::I32) {
    w.add_typed<int32_t>(name, dtype, shape, values);
  } else {
    std::vector<float> f(values.begin(), values.end());
    w.add_typed<float>(name, dtype, shape, f);
  }
  for (auto& [k, v] : meta) w.set_metadata(k, v);
  return w.serialize();
}

std::map<std::string, std::string> good_meta() {
  return {{"format", "drama-voice/1"}, {"transcript", "hi"},
          {"sample_rate", "24000"},    {"frame_rate", "12.5"},
          {"num_codebooks", "2"},      {"codec_sha256", std::string(64, 'b')}};
}

TEST(VoiceFile, RoundTrip) {
  const Voice v = sample_voice();
  const Voice back = parse_voice(serialize_voice(v), "mem");
  EXPECT_EQ(back.codes, v.codes);
  EXPECT_EQ(back.frames, 3);
  EXPECT_EQ(back.num_codebooks, 2);
  EXPECT_EQ(back.transcript, v.transcript);
  EXPECT_EQ(back.sample_rate, 24000);
  EXPECT_EQ(back.frame_rate, 12.5);
  EXPECT_EQ(back.codec_sha256, v.codec_sha256);
  const Voice codes = parse_codes(serialize_codes(v), "mem");
  EXPECT_EQ(codes.codes, v.codes);
  EXPECT_TRUE(codes.transcript.empty());
}

TEST(VoiceFile, CodesAndVoiceFormatsAreNotInterchangeable) {
  const Voice v = sample_voice();
  EXPECT_THROW(parse_voice(serialize_codes(v), "codes-as-voice"), Error);
  EXPECT_THROW(parse_codes(serialize_voice(v), "voice-as-codes"), Error);
}

TEST(VoiceFile, GoodCraftedFileParses) {
  EXPECT_NO_THROW(parse_voice(craft(good_meta(), DType::I32, {2, 2}, {0, 1, 2, 3}), "ok"));
}

TEST(VoiceFile, RefusesMalformed) {
  auto refuse = [](std::vector<uint8_t> bytes, const char* what) {
    try {
      parse_voice(bytes, "bad.voice");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.voice"), std::string::npos) << e.what();
    }
  };
  refuse({}, "empty");
  refuse({1, 2, 3}, "garbage");
  for (const char* key :
       {"format", "transcript", "sample_rate", "frame_rate", "num_codebooks", "codec_sha256"}) {
    auto m = good_meta();
    m.erase(key);
    refuse(craft(m, DType::I32, {2, 2}, {0, 1, 2, 3}), key);
  }
  auto bad = [&](const char* key, const char* value) {
    auto m = good_meta();
    m[key] = value;
    refuse(craft(m, DType::I32, {2, 2}, {0, 1, 2, 3}), key);
  };
  bad("format", "drama-voice/2");
  bad("transcript", "");
  bad("sample_rate", "24k");
  bad("sample_rate", "0");
  bad("frame_rate", "-1");
  bad("num_codebooks", "3");  // disagrees with the shape
  bad("num_codebooks", "0");
  bad("codec_sha256", "ABC");
  refuse(craft(good_meta(), DType::F32, {2, 2}, {0, 1, 2, 3}), "float codes");
  refuse(craft(good_meta(), DType::I32, {4}, {0, 1, 2, 3}), "1-D codes");
  refuse(craft(good_meta(), DType::I32, {0, 2}, {}), "no frames");
  refuse(craft(good_meta(), DType::I32, {2, 2}, {0, -1, 2, 3}), "negative code");
  refuse(craft(good_meta(), DType::I32, {2, 2}, {0, 1, 2, 3}, "tokens"), "wrong tensor name");
  SafetensorsWriter two;
  std::vector<int32_t> c = {0, 1, 2, 3};
  two.add_typed<int32_t>("codes", DType::I32, {2, 2}, c);
  two.add_typed<int32_t>("extra", DType::I32, {2, 2}, c);
  for (auto& [k, v] : good_meta()) two.set_metadata(k, v);
  refuse(two.serialize(), "extra tensor");
  auto truncated = craft(good_meta(), DType::I32, {2, 2}, {0, 1, 2, 3});
  truncated.pop_back();
  refuse(truncated, "truncated");
}

TEST(VoiceFile, WriterRefusesInconsistentVoices) {
  Voice v = sample_voice();
  v.transcript.clear();
  EXPECT_THROW(serialize_voice(v), Error);
  v = sample_voice();
  v.frames = 4;
  EXPECT_THROW(serialize_voice(v), Error);
}

}  // namespace
}  // namespace drama

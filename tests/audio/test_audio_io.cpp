// Audio I/O: 16-bit conversion, WAV headers (streaming form too), WAV/FLAC/PCM round trips,
// downmix, resampling, and refusal of empty, non-audio and truncated input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "audio/audio_io.h"
#include "util/error.h"

namespace drama {
namespace {

std::vector<float> sine(int64_t n, double freq, int64_t rate, float amp = 0.5f) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[i] = amp * static_cast<float>(std::sin(2 * M_PI * freq * i / static_cast<double>(rate)));
  return x;
}

uint32_t u32_at(const std::vector<uint8_t>& b, size_t at) {
  return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
}

TEST(AudioIo, FloatToS16ClampsAndRounds) {
  EXPECT_EQ(float_to_s16(0.0f), 0);
  EXPECT_EQ(float_to_s16(1.0f), 32767);
  EXPECT_EQ(float_to_s16(-1.0f), -32767);
  EXPECT_EQ(float_to_s16(2.0f), 32767);
  EXPECT_EQ(float_to_s16(-2.0f), -32768);
  EXPECT_EQ(float_to_s16(0.5f), 16384);  // lrint(16383.5): ties to even
  EXPECT_EQ(float_to_s16(std::nanf("")), 0);
  std::vector<uint8_t> out;
  append_s16le(std::vector<float>{1.0f, -1.0f}, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], 0xff);
  EXPECT_EQ(out[1], 0x7f);
  EXPECT_EQ(out[2], 0x01);
  EXPECT_EQ(out[3], 0x80);
}

TEST(AudioIo, StreamingWavHeaderHasUnknownSizes) {
  const auto h = streaming_wav_header(24000);
  ASSERT_EQ(h.size(), 44u);
  EXPECT_EQ(std::string(h.begin(), h.begin() + 4), "RIFF");
  EXPECT_EQ(u32_at(h, 4), 0xFFFFFFFFu);
  EXPECT_EQ(std::string(h.begin() + 36, h.begin() + 40), "data");
  EXPECT_EQ(u32_at(h, 40), 0xFFFFFFFFu);
  EXPECT_EQ(u32_at(h, 24), 24000u);
  const auto sized = wav_header(24000, 10);
  EXPECT_EQ(u32_at(sized, 4), 36u + 20u);
  EXPECT_EQ(u32_at(sized, 40), 20u);
}

TEST(AudioIo, WavFlacPcmRoundTrip) {
  const auto x = sine(4800, 440, 24000);
  const auto wav = encode_audio(x, 24000, AudioFormat::Wav);
  const auto flac = encode_audio(x, 24000, AudioFormat::Flac);
  const auto pcm = encode_audio(x, 24000, AudioFormat::Pcm);
  EXPECT_EQ(pcm.size(), x.size() * 2);
  EXPECT_EQ(wav.size(), 44 + x.size() * 2);
  EXPECT_EQ(0, std::memcmp(wav.data() + 44, pcm.data(), pcm.size()));
  EXPECT_EQ(std::string(flac.begin(), flac.begin() + 4), "fLaC");
  const DecodedAudio a = read_audio_memory(wav, "wav");
  const DecodedAudio b = read_audio_memory(flac, "flac");
  EXPECT_EQ(a.sample_rate, 24000);
  EXPECT_EQ(a.channels, 1);
  ASSERT_EQ(a.mono.size(), x.size());
  ASSERT_EQ(b.mono, a.mono);  // FLAC is lossless over the same 16-bit samples
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(a.mono[i], x[i], 1.0 / 32767);
}

TEST(AudioIo, StreamedWavReadsBack) {
  // A streamed reply saved to a file: sizes 0xFFFFFFFF, the data runs to the end of the file.
  auto wav = streaming_wav_header(24000);
  append_s16le(sine(1000, 440, 24000), wav);
  EXPECT_EQ(read_audio_memory(wav, "streamed.wav").mono.size(), 1000u);
}

TEST(AudioIo, StereoIsDownmixedToTheMean) {
  // A hand-made 16-bit stereo WAV: left = 0.5, right = -0.25 (in 1/32768 steps).
  std::vector<uint8_t> wav = wav_header(8000, 4);  // mono header, patched to stereo below
  wav[22] = 2;                                     // channels
  const uint32_t byte_rate = 8000 * 4;
  for (int i = 0; i < 4; ++i) wav[28 + i] = static_cast<uint8_t>(byte_rate >> (8 * i));
  wav[32] = 4;  // block align
  for (int f = 0; f < 2; ++f) {
    const int16_t l = 16384, r = -8192;
    wav.push_back(l & 0xff), wav.push_back(static_cast<uint8_t>(l >> 8));
    wav.push_back(r & 0xff), wav.push_back(static_cast<uint8_t>(static_cast<uint16_t>(r) >> 8));
  }
  const DecodedAudio a = read_audio_memory(wav, "stereo.wav");
  EXPECT_EQ(a.channels, 2);
  ASSERT_EQ(a.mono.size(), 2u);
  EXPECT_FLOAT_EQ(a.mono[0], 0.125f);
}

TEST(AudioIo, ResampleIsRepeatableAndKeepsPitch) {
  const auto x = sine(48000, 1000, 48000);
  const auto y = resample_audio(x, 48000, 24000);
  EXPECT_NEAR(static_cast<double>(y.size()), 24000, 2);
  EXPECT_EQ(y, resample_audio(x, 48000, 24000));
  int crossings = 0;
  for (size_t i = 1000; i + 1 < y.size() - 1000; ++i) crossings += (y[i] < 0) != (y[i + 1] < 0);
  EXPECT_NEAR(crossings, 2 * 1000 * (y.size() - 2000) / 24000.0, 4);
  EXPECT_EQ(resample_audio(x, 24000, 24000), x);
}

TEST(AudioIo, RefusesEmptyGarbageAndTruncated) {
  EXPECT_THROW(read_audio_memory({}, "empty"), Error);
  const std::string text = "this is not audio at all, just some text that goes on";
  EXPECT_THROW(
      read_audio_memory({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "text"),
      Error);
  auto wav = encode_audio(sine(24000, 300, 24000), 24000, AudioFormat::Wav);
  wav.resize(wav.size() / 2);  // the header still promises every sample
  EXPECT_THROW(read_audio_memory(wav, "cut.wav"), Error);
  auto flac = encode_audio(sine(24000, 300, 24000), 24000, AudioFormat::Flac);
  flac.resize(flac.size() / 2);
  EXPECT_THROW(read_audio_memory(flac, "cut.flac"), Error);
}

// FLAC STREAMINFO: after "fLaC" and the 4-byte block header, 10 bytes of block/frame sizes, then
// 20 bits rate, 3 bits channels-1, 5 bits bits-per-sample-1 and 36 bits of total samples.
void set_flac_total_samples(std::vector<uint8_t>& flac, uint64_t total) {
  ASSERT_GE(flac.size(), 26u);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | flac[18 + i];
  v = (v & ~((uint64_t{1} << 36) - 1)) | (total & ((uint64_t{1} << 36) - 1));
  for (int i = 7; i >= 0; --i, v >>= 8) flac[18 + i] = static_cast<uint8_t>(v & 0xff);
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    read_audio_memory(bytes, "x.flac");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Found by fuzz_audio in CI: an 82-byte FLAC whose header declares ~2^31 samples made the reader
// allocate for all of them before reading one (libFuzzer out-of-memory).
TEST(AudioIo, HeaderLengthNeverSizesAnAllocation) {
  const uint8_t found[] = {0x66, 0x4c, 0x61, 0x43, 0x0,  0x0,  0x0,  0x22, 0x10, 0x0,  0x10, 0x0,
                           0x0,  0x0,  0xdf, 0x0,  0x0,  0xdf, 0x5,  0xdc, 0x0,  0xf0, 0x65, 0x66,
                           0x65, 0x72, 0x65, 0x6e, 0x63, 0x65, 0x20, 0x6c, 0x69, 0x62, 0x46, 0x4c,
                           0x32, 0x30, 0x32, 0x32, 0x28, 0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0,
                           0xff, 0xf8, 0x77, 0x8,  0x0,  0x84, 0x84, 0x21, 0x20, 0xff, 0xd0, 0x4a,
                           0x29, 0xe4, 0x21, 0x87, 0x88, 0x69, 0x55, 0x60, 0x28, 0x0,  0x0,  0x0,
                           0x0,  0x0,  0x0,  0x0,  0x0,  0x54};
  EXPECT_NE(error_of({std::begin(found), std::end(found)}), "");

  auto flac = encode_audio(sine(24000, 300, 24000), 24000, AudioFormat::Flac);
  auto longer = flac;
  set_flac_total_samples(longer, 24000 * 300);  // five minutes declared, one second present
  EXPECT_NE(error_of(longer).find("truncated"), std::string::npos) << error_of(longer);
  auto too_long = flac;
  set_flac_total_samples(too_long, 24000 * 601);
  EXPECT_NE(error_of(too_long).find("too long"), std::string::npos) << error_of(too_long);
  auto honest = flac;
  set_flac_total_samples(honest, 24000);
  EXPECT_EQ(read_audio_memory(honest, "x.flac").mono.size(), 24000u);
}

// Only WAV and FLAC reach libsndfile: its MP3/Ogg/AIFF parsers never see untrusted bytes.
TEST(AudioIo, OnlyWavAndFlacContainersAreRead) {
  for (std::string head : {std::string("ID3\x03\0\0\0\0\0\0", 10) + std::string(64, '\xff'),
                           std::string("FORM\0\0\0@AIFFCOMM", 16) + std::string(64, '\0'),
                           std::string("OggS") + std::string(64, '\0')}) {
    const std::vector<uint8_t> bytes(head.begin(), head.end());
    EXPECT_NE(error_of(bytes).find("not a WAV or FLAC"), std::string::npos) << error_of(bytes);
  }
}

TEST(AudioIo, FormatFromNameAndPath) {
  EXPECT_EQ(audio_format_from_path("a.wav"), AudioFormat::Wav);
  EXPECT_EQ(audio_format_from_path("a.FLAC"), AudioFormat::Flac);
  EXPECT_EQ(audio_format_from_path("a.pcm"), AudioFormat::Pcm);
  EXPECT_THROW(audio_format_from_path("a.aac"), UsageError);
  EXPECT_THROW(audio_format_from_path("noext"), UsageError);
  EXPECT_THROW(audio_format_from_name("aac", "--format"), UsageError);
}

}  // namespace
}  // namespace drama

// MP3 and Ogg Opus encoders (encode_stream.h) and the time stretcher (time_stretch.h): the bytes
// decode (libsndfile: mpg123 and libopus) to audio of the expected length, frame-by-frame and
// whole encodings are the same bytes, repeats are identical, and speed 0.5 / 2 give twice and
// half the length with pitch kept.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "audio/audio_io.h"
#include "audio/encode_stream.h"
#include "audio/time_stretch.h"
#include "support/decode_output.h"
#include "util/error.h"

namespace drama {
namespace {

constexpr int64_t kRate = 24000;
constexpr size_t kFrame = 1920;  // one 12.5 Hz frame at 24 kHz

std::vector<float> tone(double seconds, double hz = 220.0) {
  std::vector<float> x(static_cast<size_t>(seconds * kRate));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * hz * double(i) / kRate) +
                              0.1 * std::sin(2 * M_PI * 3.1 * hz * double(i) / kRate));
  return x;
}

std::vector<uint8_t> framewise(AudioFormat f, const std::vector<float>& pcm) {
  auto enc = make_stream_encoder(f, kRate);
  std::vector<uint8_t> out;
  for (size_t at = 0; at < pcm.size(); at += kFrame)
    enc->push(std::span<const float>(pcm).subspan(at, std::min(kFrame, pcm.size() - at)), out);
  enc->finish(out);
  return out;
}

// Zero crossings per second: a pitch measure that a tempo change must keep.
double crossings_per_second(const std::vector<float>& x, int64_t rate) {
  int64_t n = 0;
  for (size_t i = 1; i < x.size(); ++i) n += (x[i - 1] < 0) != (x[i] < 0);
  return double(n) * double(rate) / double(x.size());
}

TEST(EncodeStream, Mp3AndOpusDecodeToTheExpectedLength) {
  const auto pcm = tone(2.0);
  for (AudioFormat f : {AudioFormat::Mp3, AudioFormat::Opus}) {
    const auto whole = encode_audio(pcm, kRate, f);
    ASSERT_GT(whole.size(), 1000u);
    if (f == AudioFormat::Mp3) {
      EXPECT_EQ(whole[0], 0xFF);  // a frame sync, no ID3 tag
    } else {
      EXPECT_EQ(std::string(whole.begin(), whole.begin() + 4), "OggS");
    }
    const DecodedAudio d = testing::decode_output(std::string(whole.begin(), whole.end()));
    // MP3 adds the encoder delay and pads to a whole frame (576 samples at 24 kHz); Opus keeps
    // the length exactly (pre-skip and end trimming).
    EXPECT_NEAR(d.seconds(), 2.0, 0.1) << int(f);
    EXPECT_EQ(d.channels, 1);
    float peak = 0;
    for (float v : d.mono) peak = std::max(peak, std::fabs(v));
    EXPECT_GT(peak, 0.2f) << "decoded audio is not the tone";
  }
}

TEST(EncodeStream, FramewiseEqualsWholeAndRepeatsAreIdentical) {
  const auto pcm = tone(1.3);
  for (AudioFormat f : {AudioFormat::Mp3, AudioFormat::Opus, AudioFormat::Pcm}) {
    const auto a = framewise(f, pcm);
    EXPECT_EQ(a, framewise(f, pcm)) << int(f);
    EXPECT_EQ(a, encode_audio(pcm, kRate, f)) << int(f);
  }
  // The streamed WAV is the whole WAV's samples behind the unknown-length header.
  const auto wav = framewise(AudioFormat::Wav, pcm);
  const auto whole = encode_audio(pcm, kRate, AudioFormat::Wav);
  EXPECT_EQ(std::vector<uint8_t>(wav.begin() + 44, wav.end()),
            std::vector<uint8_t>(whole.begin() + 44, whole.end()));
  EXPECT_THROW(make_stream_encoder(AudioFormat::Flac, kRate), UsageError);
}

TEST(EncodeStream, ExtensionsAndNames) {
  EXPECT_EQ(audio_format_from_path("x.mp3"), AudioFormat::Mp3);
  EXPECT_EQ(audio_format_from_path("x.OPUS"), AudioFormat::Opus);
  EXPECT_THROW(audio_format_from_path("x.aac"), UsageError);
  EXPECT_THROW(audio_format_from_path("x.mp4"), UsageError);
  EXPECT_STREQ(audio_content_type(AudioFormat::Mp3), "audio/mpeg");
  EXPECT_STREQ(audio_content_type(AudioFormat::Opus), "audio/ogg");
}

TEST(TimeStretch, HalfAndDoubleSpeedKeepPitchAndRepeat) {
  const auto pcm = tone(2.0);
  const double pitch = crossings_per_second(pcm, kRate);
  for (double speed : {0.5, 2.0, 0.25, 4.0}) {
    TimeStretcher s(kRate, speed);
    std::vector<float> out;
    for (size_t at = 0; at < pcm.size(); at += kFrame)
      s.push(std::span<const float>(pcm).subspan(at, std::min(kFrame, pcm.size() - at)), out);
    s.finish(out);
    EXPECT_EQ(int64_t(out.size()), std::llround(double(pcm.size()) / speed)) << speed;
    EXPECT_NEAR(crossings_per_second(out, kRate) / pitch, 1.0, 0.1) << "pitch moved at " << speed;
    // Deterministic: the same pieces give the same samples, bit for bit.
    TimeStretcher again(kRate, speed);
    std::vector<float> out2;
    for (size_t at = 0; at < pcm.size(); at += kFrame)
      again.push(std::span<const float>(pcm).subspan(at, std::min(kFrame, pcm.size() - at)), out2);
    again.finish(out2);
    EXPECT_EQ(out, out2) << speed;
  }
}

}  // namespace
}  // namespace drama

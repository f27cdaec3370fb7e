// Streaming Mimi decode equals whole-utterance decode bit for bit; codes are validated; encode
// gives ceil(samples / samples_per_frame) frames.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "codec/mimi.h"
#include "codec_testing.h"
#include "util/error.h"

namespace drama {
namespace {

class MimiStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir();
    testing::write_tiny_codec(scratch_->path() / "codec", 7);
    backend_ = make_backend({"cpu", 1}).release();
    model_ = new MimiModel(scratch_->path() / "codec", *backend_);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete backend_;
    delete scratch_;
  }
  static testing::ScratchDir* scratch_;
  static Backend* backend_;
  static MimiModel* model_;
};
testing::ScratchDir* MimiStreamTest::scratch_ = nullptr;
Backend* MimiStreamTest::backend_ = nullptr;
MimiModel* MimiStreamTest::model_ = nullptr;

TEST_F(MimiStreamTest, StreamedEqualsWholeBitwise) {
  const int64_t k = 8, spf = model_->samples_per_frame();
  ASSERT_EQ(spf, 1920);
  for (int64_t frames : {1, 2, 3, 7, 16}) {
    const auto codes = testing::random_codes(frames, k, model_->codebook_size(), 100 + frames);
    const std::vector<float> whole = model_->decode(codes, frames, k);
    ASSERT_EQ(static_cast<int64_t>(whole.size()), frames * spf);
    MimiDecoderStream stream(*model_);
    std::vector<float> streamed;
    for (int64_t f = 0; f < frames; ++f) {
      const auto pcm = stream.decode_frame(std::span(codes).subspan(f * k, k));
      ASSERT_EQ(static_cast<int64_t>(pcm.size()), spf);
      streamed.insert(streamed.end(), pcm.begin(), pcm.end());
    }
    ASSERT_EQ(0, std::memcmp(whole.data(), streamed.data(), whole.size() * sizeof(float)))
        << frames << " frames";
    double energy = 0;
    for (float v : whole) {
      ASSERT_TRUE(std::isfinite(v));
      energy += v * v;
    }
    EXPECT_GT(energy, 0.0);
  }
}

TEST_F(MimiStreamTest, ResetStartsANewUtterance) {
  const auto codes = testing::random_codes(3, 8, model_->codebook_size(), 5);
  MimiDecoderStream stream(*model_);
  const auto first = stream.decode_frame(std::span(codes).subspan(0, 8));
  stream.decode_frame(std::span(codes).subspan(8, 8));
  stream.reset();
  const auto again = stream.decode_frame(std::span(codes).subspan(0, 8));
  EXPECT_EQ(first, again);
}

TEST_F(MimiStreamTest, FewerCodebooksDecode) {
  for (int64_t k : {1, 2, 5}) {
    const auto codes = testing::random_codes(2, k, model_->codebook_size(), 9);
    EXPECT_EQ(model_->decode(codes, 2, k).size(), 2u * 1920u);
  }
}

TEST_F(MimiStreamTest, RefusesBadCodes) {
  MimiDecoderStream stream(*model_);
  std::vector<int32_t> codes(8, 0);
  codes[3] = static_cast<int32_t>(model_->codebook_size());
  EXPECT_THROW(stream.decode_frame(codes), Error);
  codes[3] = -1;
  EXPECT_THROW(stream.decode_frame(codes), Error);
  EXPECT_THROW(stream.decode_frame(std::vector<int32_t>(9, 0)), Error);  // > num_quantizers
  EXPECT_THROW(stream.decode_frame(std::vector<int32_t>{}), Error);
  EXPECT_EQ(stream.frames(), 0);
}

// Streams decoded together in one pass (MimiDecodeBatch) give each stream the samples of its own
// decode, bit for bit: streams that start at different frames, batches whose members change from
// pass to pass, fewer codebooks, on a backend that splits every loop across threads.
TEST_F(MimiStreamTest, BatchedStreamsEqualEachAlone) {
  const int64_t spf = model_->samples_per_frame();
  for (int64_t k : {8, 3}) {
    constexpr int64_t kStreams = 5, kFrames = 6;
    std::vector<std::vector<int32_t>> codes;
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < kStreams; ++i) {
      codes.push_back(testing::random_codes(kFrames, k, model_->codebook_size(), 40 + i));
      alone.push_back(model_->decode(codes.back(), kFrames, k));
    }
    for (int threads : {1, 2}) {
      auto backend = make_backend({"cpu", threads, 0.0});
      MimiModel model(scratch_->path() / "codec", *backend);
      MimiDecodeBatch batch(model);
      std::vector<std::unique_ptr<MimiDecoderStream>> streams;
      for (int64_t i = 0; i < kStreams; ++i)
        streams.push_back(std::make_unique<MimiDecoderStream>(model));
      std::vector<std::vector<float>> got(kStreams);
      std::vector<int64_t> next(kStreams, 0);
      // Pass p decodes the next frame of every stream i with i <= p whose (p + i) % 3 != 2, so
      // stream i starts at pass i and streams skip passes: the batch changes every pass.
      for (int64_t p = 0; p < 3 * kFrames + kStreams; ++p) {
        std::vector<MimiDecoderStream*> members;
        std::vector<std::span<const int32_t>> frames;
        std::vector<std::vector<float>> pcm(kStreams);
        std::vector<std::vector<float>*> outs;
        std::vector<int64_t> who;
        for (int64_t i = 0; i < kStreams; ++i) {
          if (i > p || next[i] == kFrames || (p + i) % 3 == 2) continue;
          members.push_back(streams[i].get());
          frames.push_back(std::span(codes[i]).subspan(next[i] * k, k));
          outs.push_back(&pcm[i]);
          who.push_back(i);
        }
        if (members.empty()) continue;
        batch.decode(members, frames, outs);
        for (int64_t i : who) {
          ASSERT_EQ(static_cast<int64_t>(pcm[i].size()), spf);
          got[i].insert(got[i].end(), pcm[i].begin(), pcm[i].end());
          ++next[i];
        }
      }
      for (int64_t i = 0; i < kStreams; ++i) {
        ASSERT_EQ(next[i], kFrames);
        EXPECT_EQ(streams[i]->frames(), kFrames);
        ASSERT_EQ(got[i].size(), alone[i].size());
        EXPECT_EQ(0, std::memcmp(got[i].data(), alone[i].data(), got[i].size() * sizeof(float)))
            << "stream " << i << ", " << k << " codebooks, " << threads << " threads";
      }
    }
  }
}

// A pass with one bad frame, a repeated stream or frames of different codebook counts is
// refused before any stream moves.
TEST_F(MimiStreamTest, BatchRefusesBadPassesAndChangesNothing) {
  MimiDecodeBatch batch(*model_);
  MimiDecoderStream a(*model_), b(*model_);
  std::vector<int32_t> good(8, 1), bad(8, 1), short_frame(3, 1);
  bad[5] = static_cast<int32_t>(model_->codebook_size());
  std::vector<float> pa, pb;
  std::vector<MimiDecoderStream*> both{&a, &b}, twice{&a, &a};
  std::vector<std::vector<float>*> outs{&pa, &pb};
  std::vector<std::span<const int32_t>> one_bad{good, bad}, mixed{good, short_frame},
      fine{good, good};
  EXPECT_THROW(batch.decode(both, one_bad, outs), Error);
  EXPECT_THROW(batch.decode(both, mixed, outs), Error);
  EXPECT_THROW(batch.decode(twice, fine, outs), Error);
  EXPECT_EQ(a.frames(), 0);
  EXPECT_EQ(b.frames(), 0);
  // Nothing moved: a pass now equals a fresh stream's first frame.
  batch.decode(both, fine, outs);
  MimiDecoderStream fresh(*model_);
  EXPECT_EQ(pa, fresh.decode_frame(good));
  EXPECT_EQ(pb, pa);
}

TEST_F(MimiStreamTest, EncodeFrameCount) {
  for (int64_t samples : {1, 1919, 1920, 1921, 5000}) {
    const auto pcm = testing::test_signal(samples, 24000, 3);
    const auto codes = model_->encode(pcm, 8);
    const int64_t frames = (samples + 1919) / 1920;
    ASSERT_EQ(static_cast<int64_t>(codes.size()), frames * 8) << samples;
    for (int32_t c : codes) ASSERT_TRUE(c >= 0 && c < model_->codebook_size());
  }
  EXPECT_THROW(model_->encode(std::vector<float>{}, 8), Error);
  EXPECT_THROW(model_->encode(std::vector<float>(100, 0.f), 9), Error);
}

}  // namespace
}  // namespace drama

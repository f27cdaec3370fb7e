// Engine::speak on the tiny checkpoint: with two threads the codec decodes beside the model
// (a pipeline), with one they take turns; the audio must be the same bytes, a sink that refuses
// a frame must stop the generation within one frame, and errors on either side must reach the
// caller without hanging.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "engine/engine.h"
#include "model/model_testing.h"
#include "util/error.h"

namespace drama {
namespace {

using testing::make_checkpoint;

std::unique_ptr<Engine> engine(int threads) {
  EngineOptions o;
  o.backend = {"cpu", threads, -1};
  return load_engine(make_checkpoint("tiny-nvfp4", "--nvfp4"), o);
}

SpeechRequest request(uint64_t seed) {
  SpeechRequest r;
  r.text = "Pipelined or not, the same audio.";
  r.seed = seed;
  r.sampling = {0.9f, 50, 1.0f};
  r.max_frames = 40;
  return r;
}

TEST(Speak, PipelinedAndSequentialGiveTheSameAudio) {
  auto one = engine(1), two = engine(2);
  EXPECT_EQ(one->backend_name().find("codec beside it"), std::string::npos);
  EXPECT_NE(two->backend_name().find("codec beside it"), std::string::npos);
  for (uint64_t seed : {2u, 4u, 7u}) {
    std::vector<float> a, b;
    SpeechResult ra = one->speak(request(seed), [&](std::span<const float> pcm) {
      a.insert(a.end(), pcm.begin(), pcm.end());
      return true;
    });
    SpeechResult rb = two->speak(request(seed), [&](std::span<const float> pcm) {
      b.insert(b.end(), pcm.begin(), pcm.end());
      return true;
    });
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size()) << "seed " << seed;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "seed " << seed;
    EXPECT_EQ(ra.frames, rb.frames);
    EXPECT_EQ(ra.reached_eos, rb.reached_eos);
    EXPECT_EQ(ra.samples, rb.samples);
    EXPECT_FALSE(rb.cancelled);
  }
}

TEST(Speak, ARefusedFrameStopsThePipelineWithinOneFrame) {
  auto two = engine(2);
  SpeechRequest r = request(2);
  r.max_frames = 200;
  int delivered = 0;
  SpeechResult res = two->speak(r, [&](std::span<const float>) { return ++delivered < 3; });
  EXPECT_EQ(delivered, 3);
  EXPECT_TRUE(res.cancelled);
  EXPECT_FALSE(res.reached_eos);
  // Frame 3 was refused; the model may have made frame 4 while the codec decoded frame 3.
  EXPECT_GE(res.frames, 3);
  EXPECT_LE(res.frames, 4);
}

TEST(Speak, ErrorsOnEitherSideReachTheCaller) {
  auto two = engine(2);
  SpeechRequest empty = request(2);
  empty.text.clear();  // refused by the model's thread
  EXPECT_THROW(two->speak(empty, [](std::span<const float>) { return true; }), UsageError);
  int calls = 0;
  EXPECT_THROW(two->speak(request(2),
                          [&](std::span<const float>) -> bool {
                            if (++calls == 2) throw std::runtime_error("sink failed");
                            return true;
                          }),
               std::runtime_error);
  EXPECT_EQ(calls, 2);
  // The engine is still usable afterwards.
  EXPECT_FALSE(two->speak(request(2), [](std::span<const float>) { return true; }).cancelled);
}

}  // namespace
}  // namespace drama

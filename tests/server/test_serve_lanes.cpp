// Lanes end to end: twelve different requests sent at once to `drama serve --lanes 4` give, byte
// for byte, what the same requests give one at a time on `--lanes 1`, on paired and on separate
// guidance servers. The twelve differ in seed, voice (stored, inline or none), gamma (1, 1.5, 2
// with --request-gamma), sampling, length (one frame to max_duration_s), reply (whole WAV, PCM,
// FLAC, streamed WAV, SSE); one is cancelled midway (its bytes are a prefix of the whole reply)
// and one is refused. Real server processes on the tiny random checkpoint, over loopback.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "server/base64.h"
#include "server/http_test_util.h"
#include "server/server_process.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Req {
  json body;
  size_t hang_up_after = 0;  // > 0: the client hangs up once it has this many bytes
};

json speech(uint64_t seed, double max_s, json extra = json::object()) {
  json j = {{"input", "Lanes test number " + std::to_string(seed) + "."},
            {"seed", seed},
            {"max_duration_s", max_s}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

std::vector<Req> twelve(const std::string& ref_b64) {
  std::vector<Req> r;
  r.push_back({speech(1, 1.0)});
  r.push_back({speech(2, 2.0, {{"voice", "voice_a"}, {"cfg_scale", 1.5}, {"stream", true}})});
  r.push_back({speech(3, 1.5,
                      {{"voice", "voice_b"},
                       {"cfg_scale", 2.0},
                       {"stream_format", "sse"},
                       {"response_format", "pcm"}})});
  r.push_back(
      {speech(4, 1.0, {{"voice", "voice_a"}, {"cfg_scale", 1.0}, {"response_format", "pcm"}})});
  r.push_back({speech(5, 0.08)});  // one frame at 12.5 frames/s
  r.push_back({speech(6, 1.2,
                      {{"voice", "voice_b"},
                       {"cfg_scale", 1.5},
                       {"temperature", 0.0},
                       {"response_format", "flac"}})});
  r.push_back({speech(2, 60.0)});  // seed 2 runs hundreds of frames: the longest
  r.push_back(
      {speech(8, 1.6, {{"voice", "voice_a"}, {"cfg_scale", 2.0}, {"top_k", 5}, {"stream", true}})});
  r.push_back({speech(
      9, 1.0, {{"ref_audio", ref_b64}, {"ref_text", "An inline reference."}, {"cfg_scale", 1.5}})});
  r.push_back({speech(10, 2.0, {{"voice", "voice_b"}, {"cfg_scale", 1.5}, {"top_p", 0.8}})});
  Req cancelled{speech(2, 60.0, {{"voice", "voice_a"}, {"cfg_scale", 1.5}, {"stream", true}})};
  cancelled.hang_up_after = 20000;
  r.push_back(cancelled);
  r.push_back({speech(12, 1.0, {{"voice", "no_such_voice"}})});  // refused: 404
  return r;
}

Reply send(int port, const Req& q) {
  if (q.hang_up_after == 0) return post(port, "/v1/audio/speech", q.body.dump());
  return post(port, "/v1/audio/speech", q.body.dump(), "application/json",
              [&](const std::string& so_far) { return so_far.size() < q.hang_up_after; });
}

class ServeLanes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(env_or("DRAMA_TEST_TMP", "/tmp")) / ("serve-lanes-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    setenv("DRAMA_CACHE", (dir_ / "cache").c_str(), 1);
    ckpt_ = dir_ / "tiny";
    const int rc = run_command({env_or("DRAMA_BIN", "drama"), "make-checkpoint", "--config",
                                env_or("DRAMA_SOURCE_DIR", ".") + "/configs/tiny.json", "--seed",
                                "1", "--nvfp4", "-o", ckpt_.string()},
                               dir_ / "make-checkpoint.log");
    ASSERT_EQ(rc, 0) << "make-checkpoint failed; see " << (dir_ / "make-checkpoint.log");
  }

  static std::vector<std::string> args(const std::string& cfg, int lanes) {
    return {"--checkpoint",
            ckpt_.string(),
            "--manifest",
            (ckpt_ / "manifest.json").string(),
            "--voices",
            (dir_ / "voices").string(),
            "--backend",
            env_or("DRAMA_SERVER_BACKEND", "cpu"),  // cuda on the GPU machine (cuda-h200-run.sh)
            "--threads",
            "2",
            "--cfg",
            cfg,
            "--request-gamma",
            "--lanes",
            std::to_string(lanes),
            "--max-queue",
            "16"};
  }

  static inline fs::path dir_, ckpt_;
};

TEST_F(ServeLanes, TwelveConcurrentRequestsOnFourLanesEqualOneAtATime) {
  std::string ref_b64;
  {
    // Voices, written once into the shared voices directory from audio the model itself made.
    ServerProcess s(args("paired", 1), dir_ / "setup.log");
    ASSERT_TRUE(s.ready()) << s.log_text();
    const std::string a = post(s.port(), "/v1/audio/speech", speech(31, 2.0).dump()).body;
    const std::string b = post(s.port(), "/v1/audio/speech", speech(32, 2.0).dump()).body;
    ref_b64 = server::base64_encode({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
    for (const auto& [id, wav] : {std::pair{"voice_a", a}, std::pair{"voice_b", b}}) {
      const json v = {
          {"name", id},
          {"id", id},
          {"ref_text", "A reference voice."},
          {"audio_base64",
           server::base64_encode({reinterpret_cast<const uint8_t*>(wav.data()), wav.size()})}};
      ASSERT_EQ(post(s.port(), "/v1/audio/voices", v.dump()).status, 200);
    }
    EXPECT_EQ(s.terminate(), 0);
  }
  const std::vector<Req> reqs = twelve(ref_b64);
  int compared = 0;
  for (const std::string cfg : {"paired", "separate"}) {
    SCOPED_TRACE(cfg);
    std::vector<Reply> one(reqs.size()), four(reqs.size());
    {
      ServerProcess s(args(cfg, 1), dir_ / ("one-" + cfg + ".log"));
      ASSERT_TRUE(s.ready()) << s.log_text();
      for (size_t i = 0; i < reqs.size(); ++i) {
        Req whole = reqs[i];
        whole.hang_up_after = 0;  // lanes 1 gives the whole reply the cancelled one is a prefix of
        one[i] = send(s.port(), whole);
      }
      EXPECT_EQ(s.terminate(), 0);
    }
    {
      ServerProcess s(args(cfg, 4), dir_ / ("four-" + cfg + ".log"));
      ASSERT_TRUE(s.ready()) << s.log_text();
      EXPECT_EQ(get(s.port(), "/health").json()["lanes"], 4);
      std::vector<std::thread> threads;
      for (size_t i = 0; i < reqs.size(); ++i)
        threads.emplace_back([&, i] { four[i] = send(s.port(), reqs[i]); });
      for (auto& t : threads) t.join();
      // The step did batch: more than one lane made frames in the mean step.
      const std::string metrics = get(s.port(), "/metrics").body;
      const size_t at = metrics.find("\ndrama_lane_occupancy ");
      ASSERT_NE(at, std::string::npos);
      EXPECT_GT(std::atof(metrics.c_str() + at + 22), 0.25) << metrics;
      // And the codec shared passes: frames of several requests decoded together (the bytes
      // compared below are each request's own).
      auto counter = [&](const std::string& name) {
        const size_t c = metrics.find("\n" + name + " ");
        return c == std::string::npos ? -1.0 : std::atof(metrics.c_str() + c + name.size() + 2);
      };
      const double passes = counter("drama_codec_passes_total");
      EXPECT_GT(passes, 0) << metrics;
      EXPECT_GT(counter("drama_codec_frames_total"), passes) << metrics;
      // Every lane is given back. The hung-up request can be the last to get a lane (12
      // requests, 4 lanes); its client returns once it has its bytes, and the server sees the
      // hang-up a frame or two later, on its own thread: in a -j2 run /health, read just after
      // the joins, once showed its lane still held (the server logged it cancelled 1 ms after
      // that read). So the lanes are waited for, 10 s at most.
      int in_use = -1, waits = 0;
      for (int i = 0; i < 200 && in_use != 0; ++i) {
        in_use = get(s.port(), "/health").json().value("lanes_in_use", -1);
        if (in_use != 0) {
          ++waits;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
      EXPECT_EQ(in_use, 0);
      if (waits > 0)
        std::printf("%s: lanes given back %d ms after the last reply\n", cfg.c_str(), 50 * waits);
      EXPECT_EQ(s.terminate(), 0);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i) + ": " + reqs[i].body.dump());
      if (reqs[i].hang_up_after > 0) {
        ASSERT_EQ(one[i].status, 200);
        ASSERT_GE(four[i].body.size(), reqs[i].hang_up_after);
        ASSERT_GT(one[i].body.size(), four[i].body.size());  // it was cut short
        EXPECT_EQ(one[i].body.compare(0, four[i].body.size(), four[i].body), 0);
        ++compared;
        continue;
      }
      EXPECT_EQ(four[i].status, one[i].status);
      EXPECT_EQ(four[i].header("X-Drama-Seed"), one[i].header("X-Drama-Seed"));
      ASSERT_EQ(four[i].body.size(), one[i].body.size());
      EXPECT_TRUE(four[i].body == one[i].body);
      ++compared;
    }
    EXPECT_EQ(reqs.back().body["voice"], "no_such_voice");
    EXPECT_EQ(one.back().status, 404);
    EXPECT_EQ(one[4].status, 200);  // the one-frame request
  }
  EXPECT_EQ(compared, 24);
}

}  // namespace
}  // namespace drama::testing

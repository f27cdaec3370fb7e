// labels: slow
// Bounded load on a real `drama serve` (tiny checkpoint, --max-queue 2): 8 concurrent clients,
// 200 requests in all. Every request either completes with exactly the bytes its (text, seed)
// gives, or is refused busy (503 + Retry-After); none hangs; resident memory after the run stays
// within 10% of what it was after the first 20 requests. Once with one lane (one generation at a
// time, most requests refused busy), once with four lanes at full concurrency, where the memory
// baseline is taken after a first concurrent burst of 100 requests: four codec streams and more
// HTTP workers are live at once there, and the heap's high-water mark rose over the first few
// hundred requests before it stayed flat (measured: 31.7 MiB after 200 requests, 32.7 MiB from
// 1000 to 1600).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "server/http_test_util.h"
#include "server/server_process.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;

std::string body_for(int variant) {
  static const char* texts[] = {"Load test one.", "Second load text.", "A third one here.",
                                "Four."};
  return std::string(R"({"input": ")") + texts[variant % 4] + R"(", "seed": )" +
         std::to_string(100 + variant) + R"(, "max_duration_s": 0.4, "response_format": "pcm")" +
         (variant % 2 ? R"(, "stream": true)" : "") + "}";
}

void eight_clients_two_hundred_requests(const std::string& lanes, bool concurrent_warmup) {
  fs::path dir =
      fs::path(env_or("DRAMA_TEST_TMP", "/tmp")) / ("serve-load-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("DRAMA_CACHE", (dir / "cache").c_str(), 1);  // own device locks
  fs::path ckpt = dir / "tiny";
  ASSERT_EQ(run_command({env_or("DRAMA_BIN", "drama"), "make-checkpoint", "--config",
                         env_or("DRAMA_SOURCE_DIR", ".") + "/configs/tiny.json", "--seed", "1",
                         "--nvfp4", "-o", ckpt.string()},
                        dir / "make-checkpoint.log"),
            0);
  ServerProcess s(
      {"--checkpoint", ckpt.string(), "--manifest", (ckpt / "manifest.json").string(), "--voices",
       (dir / "voices").string(), "--backend", env_or("DRAMA_SERVER_BACKEND", "cpu"), "--threads",
       "1", "--max-queue", "2", "--lanes", lanes},
      dir / "serve.log");
  ASSERT_TRUE(s.ready()) << s.log_text();

  // Reference bytes per variant (the four texts, each whole and streamed: pcm bytes agree).
  std::vector<std::string> expected(8);
  for (int v = 0; v < 8; ++v) {
    Reply r = post(s.port(), "/v1/audio/speech", body_for(v));
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_FALSE(r.body.empty());
    expected[size_t(v)] = r.body;
  }
  std::atomic<int> next{0}, ok{0}, busy{0}, wrong{0}, hung{0};
  auto burst = [&](int count) {
    next = 0;
    std::vector<std::thread> clients;
    for (int c = 0; c < 8; ++c) {
      clients.emplace_back([&] {
        for (int i; (i = next++) < count;) {
          int v = i % 8;
          Reply r = post(s.port(), "/v1/audio/speech", body_for(v), "application/json", {}, 120);
          if (r.status == 200 && r.body == expected[size_t(v)])
            ok++;
          else if (r.status == 503 && r.header("Retry-After") == "1")
            busy++;
          else if (r.status < 0)
            hung++;
          else
            wrong++;
        }
      });
    }
    for (auto& t : clients) t.join();
  };
  if (concurrent_warmup) {
    burst(92);  // 100 in all before the baseline
  } else {
    for (int i = 0; i < 12; ++i)
      ASSERT_EQ(post(s.port(), "/v1/audio/speech", body_for(i % 8)).body, expected[size_t(i % 8)]);
  }
  const int before_baseline = concurrent_warmup ? 100 : 20;
  long rss_baseline = s.rss_kib();
  burst(200 - before_baseline);
  long rss_end = s.rss_kib();
  std::printf("ok %d busy %d wrong %d hung %d; rss after %d: %ld KiB, after 200: %ld KiB\n",
              ok.load(), busy.load(), wrong.load(), hung.load(), before_baseline, rss_baseline,
              rss_end);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(hung.load(), 0);
  EXPECT_EQ(ok + busy, 200 - 8 - (concurrent_warmup ? 0 : 12));
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(get(s.port(), "/health").status, 200);
  EXPECT_LE(double(rss_end), 1.10 * double(rss_baseline));
  EXPECT_EQ(s.terminate(), 0);
}

TEST(ServeLoad, EightClientsTwoHundredRequestsOneLane) {
  eight_clients_two_hundred_requests("1", false);
}

TEST(ServeLoad, EightClientsTwoHundredRequestsFourLanes) {
  eight_clients_two_hundred_requests("4", true);
}

}  // namespace
}  // namespace drama::testing

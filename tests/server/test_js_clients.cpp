// labels: slow js
// Node clients against a real `drama serve` on the bundled mini model, with an API key and
// the voice alias alloy: tests/js/openai.test.mjs (the official OpenAI SDK) and
// tests/js/browser.test.mjs (the web page in Debian's chromium through playwright-core). The
// MP3 and Opus replies the SDK test saves are decoded here with libsndfile. tests/js/node_modules
// comes from `npm ci` in scripts/install-deps.sh.
#include <gtest/gtest.h>

#include <filesystem>

#include "audio/audio_io.h"
#include "server/http_test_util.h"
#include "server/server_process.h"
#include "support/decode_output.h"
#include "util/fs.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;

class JsClients : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(env_or("DRAMA_TEST_TMP", "/tmp")) / ("js-clients-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    setenv("DRAMA_CACHE", (dir_ / "cache").c_str(), 1);
  }
  static fs::path js_dir() { return fs::path(env_or("DRAMA_SOURCE_DIR", ".")) / "tests" / "js"; }

  // Runs one Node test file against a fresh server; its output lands in `<name>.log`.
  static int run_node(const std::string& file, const std::string& name) {
    // The bundled model (--weights mini, generated into this suite's DRAMA_CACHE): random
    // weights that never end the utterance, about 10 ms a frame, so a stream spans many reads.
    ServerProcess server({"--threads", "2", "--voices", (dir_ / ("voices-" + name)).string(),
                          "--api-key", kKey, "--voice-alias", "alloy=sdk_ref", "--max-queue", "4"},
                         dir_ / (name + "-server.log"));
    EXPECT_TRUE(server.ready()) << server.log_text();
    if (!server.ready()) return -1;
    setenv("DRAMA_URL", ("http://127.0.0.1:" + std::to_string(server.port())).c_str(), 1);
    setenv("DRAMA_API_KEY", kKey, 1);
    setenv("DRAMA_OUT", (dir_ / "out").c_str(), 1);
    const fs::path log = dir_ / (name + ".log");
    const int rc = run_command(
        {"/usr/bin/node", "--test", "--test-reporter=spec", (js_dir() / file).string()}, log);
    if (rc != 0) {
      ADD_FAILURE() << file << " failed:\n"
                    << read_text_file(log) << "\nserver log:\n"
                    << server.log_text();
    }
    EXPECT_EQ(server.terminate(), 0);
    return rc;
  }

  static constexpr const char* kKey = "sk-drama-js-test";
  static inline fs::path dir_;
};

TEST_F(JsClients, NodeModulesAreInstalled) {
  ASSERT_TRUE(fs::exists(js_dir() / "node_modules" / "openai"))
      << "run scripts/install-deps.sh (npm ci in tests/js)";
  ASSERT_TRUE(fs::exists("/usr/bin/chromium")) << "install Debian's chromium (scripts/deps.txt)";
}

TEST_F(JsClients, OpenAiSdk) {
  ASSERT_EQ(run_node("openai.test.mjs", "openai"), 0);
  // The SDK saved each whole reply: MP3 and Opus decode to the PCM reply's length.
  const std::string pcm = read_text_file(dir_ / "out" / "reply.pcm");
  ASSERT_GT(pcm.size(), 1000u);
  const double seconds = double(pcm.size() / 2) / 24000.0;
  for (const char* f : {"mp3", "opus", "flac", "wav"}) {
    const DecodedAudio d =
        decode_output(read_text_file(dir_ / "out" / (std::string("whole.") + f)));
    EXPECT_NEAR(d.seconds(), seconds, f == std::string("mp3") ? 0.1 : 0.03) << f;
    EXPECT_EQ(d.channels, 1) << f;
  }
}

TEST_F(JsClients, WebPageInChromium) {
  ASSERT_EQ(run_node("browser.test.mjs", "browser"), 0);
}

}  // namespace
}  // namespace drama::testing

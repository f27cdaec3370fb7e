// labels: slow
// Issue 15 on the command line: codec and voice commands verify the checkpoint as say and serve
// do (a flipped byte inside a codec tensor is refused naming the file, no output left); say and
// the server refuse the same limits with the same rule; say's format follows -o; --version and
// --help; --checkpoint without --manifest says to name one; a second server on a held port exits
// with one line while the first keeps serving.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "audio/audio_io.h"
#include "codec/codec_testing.h"
#include "server/fake_engine.h"
#include "server/http_test_util.h"
#include "server/server_process.h"
#include "server/speech_server.h"
#include "support/decode_output.h"
#include "support/drama_cli.h"
#include "util/fs.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;

class DropInCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir();
    setenv("DRAMA_CACHE", (dir() / "cache").c_str(), 1);
    const CliResult r =
        run_drama("make-checkpoint --config " +
                      quote(env_or("DRAMA_SOURCE_DIR", ".") + "/configs/tiny.json") +
                      " --seed 1 --nvfp4 -o " + quote(ckpt().string()),
                  dir());
    ASSERT_EQ(r.status, 0) << r.err;
    std::vector<float> pcm = test_signal(2 * 24000, 24000, 3);
    write_audio_file(dir() / "ref.wav", pcm, 24000, AudioFormat::Wav);
  }
  static void TearDownTestSuite() { delete scratch_; }
  static fs::path dir() { return scratch_->path(); }
  static fs::path ckpt() { return dir() / "tiny"; }
  static std::string weights(const fs::path& c = ckpt()) {
    return " --checkpoint " + quote(c.string()) + " --manifest " +
           quote((c / "manifest.json").string()) + " --threads 1";
  }
  static ScratchDir* scratch_;
};
ScratchDir* DropInCli::scratch_ = nullptr;

TEST_F(DropInCli, CodecCommandsRefuseAFlippedCodecByteAndLeaveNoOutput) {
  // A good codes file first, from the intact checkpoint.
  const fs::path codes = dir() / "good.codes";
  CliResult ok = run_drama("codec encode " + quote((dir() / "ref.wav").string()) + " -o " +
                               quote(codes.string()) + weights(),
                           dir());
  ASSERT_EQ(ok.status, 0) << ok.err;
  // The copy with one byte flipped inside a tensor of codec/model.safetensors.
  const fs::path bad = dir() / "flipped";
  fs::copy(ckpt(), bad, fs::copy_options::recursive);
  const fs::path st = bad / "codec" / "model.safetensors";
  std::string bytes = read_text_file(st);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | uint8_t(bytes[size_t(i)]);
  const size_t at = 8 + size_t(header) + 64;  // inside the first tensor's data
  ASSERT_LT(at, bytes.size());
  bytes[at] = char(bytes[at] ^ 0x10);
  std::ofstream(st, std::ios::binary | std::ios::trunc) << bytes;

  const std::vector<std::pair<std::string, fs::path>> cases = {
      {"codec encode " + quote((dir() / "ref.wav").string()) + " -o ", dir() / "x.codes"},
      {"codec decode " + quote(codes.string()) + " -o ", dir() / "x.wav"},
      {"voice write " + quote((dir() / "ref.wav").string()) + " --transcript 'Hello.' -o ",
       dir() / "x.voice"}};
  for (const auto& [cmd, out] : cases) {
    const CliResult r = run_drama(cmd + quote(out.string()) + weights(bad), dir());
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("codec/model.safetensors"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << out;
    // The intact checkpoint works for the same command.
    const CliResult good = run_drama(cmd + quote(out.string()) + weights(), dir());
    EXPECT_EQ(good.status, 0) << cmd << "\n" << good.err;
    EXPECT_TRUE(fs::exists(out));
  }
}

TEST_F(DropInCli, CodecCommandsUseTheDefaultModelWhenNoneIsGiven) {
  // DRAMA_CACHE is this suite's directory: the bundled mini model is generated there, verified
  // against its pinned manifest and used, as `say` and `serve` do.
  const fs::path voice = dir() / "default.voice";
  const CliResult r =
      run_drama("voice write " + quote((dir() / "ref.wav").string()) +
                    " --transcript 'Hello.' --threads 1 -o " + quote(voice.string()),
                dir());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("(pinned:"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(voice));
  const fs::path codes = dir() / "default.codes";
  const CliResult e = run_drama("codec encode " + quote((dir() / "ref.wav").string()) +
                                    " --threads 1 -o " + quote(codes.string()),
                                dir());
  EXPECT_EQ(e.status, 0) << e.err;
  const CliResult d = run_drama("codec decode " + quote(codes.string()) + " --threads 1 -o " +
                                    quote((dir() / "default.opus").string()),
                                dir());
  EXPECT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(read_text_file(dir() / "default.opus").substr(0, 4), "OggS");
}

TEST_F(DropInCli, CheckpointWithoutManifestSaysToNameOne) {
  const CliResult r = run_drama("say hello -o " + quote((dir() / "m.wav").string()) +
                                    " --checkpoint " + quote(ckpt().string()) + " --threads 1",
                                dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("files bad"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--manifest " + (ckpt() / "manifest.json").string()), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir() / "m.wav"));
}

TEST_F(DropInCli, SayFollowsTheExtensionAndRefusesUnknownOnes) {
  for (const char* ext : {"wav", "flac", "pcm", "mp3", "opus"}) {
    const fs::path out = dir() / (std::string("say.") + ext);
    const CliResult r = run_drama(
        "say 'Hello there.' --seed 3 --max-frames 6 -o " + quote(out.string()) + weights(), dir());
    ASSERT_EQ(r.status, 0) << ext << ": " << r.err;
    const std::string b = read_text_file(out);
    if (std::string(ext) == "pcm") {
      EXPECT_EQ(b.size(), 6u * 1920 * 2);
      continue;
    }
    const DecodedAudio d = decode_output(b);
    EXPECT_NEAR(d.seconds(), 6 * 0.08, 0.1) << ext;
    const std::string magic = std::string(ext) == "mp3"    ? "\xff"
                              : std::string(ext) == "opus" ? "OggS"
                              : std::string(ext) == "wav"  ? "RIFF"
                                                           : "fLaC";
    EXPECT_EQ(b.substr(0, magic.size()), magic) << ext;
  }
  const CliResult bad =
      run_drama("say hi -o " + quote((dir() / "say.xyz").string()) + weights(), dir());
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("wav, flac, pcm, mp3 or opus"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir() / "say.xyz"));
}

TEST_F(DropInCli, VersionAndHelpDefaults) {
  const CliResult v = run_drama("--version", dir());
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("drama ", 0), 0u) << v.out;
  const CliResult say = run_drama("say --help", dir());
  EXPECT_EQ(say.status, 0);
  for (const char* d : {"=out.wav", "=paired", "=mini", "=auto", "=1 ", "=60 "})
    EXPECT_NE(say.out.find(d), std::string::npos) << d << " missing in:\n" << say.out;
  const CliResult serve = run_drama("serve --help", dir());
  for (const char* d : {"=127.0.0.1", "=8080", "1024]=4", "--api-key", "--voice-alias"})
    EXPECT_NE(serve.out.find(d), std::string::npos) << d << " missing in:\n" << serve.out;
}

// The server of the limit tests: the fake engine in process, guidance allowed per request.
struct LimitServer {
  FakeEngine engine;
  std::unique_ptr<server::SpeechServer> srv;
  std::thread thread;
  int port = 0;
  explicit LimitServer(const fs::path& voices) {
    server::ServerOptions so;
    so.port = 0;
    so.request_gamma = true;
    so.voices_dir = voices;
    so.provenance = "override:fake";
    srv = std::make_unique<server::SpeechServer>(engine, so);
    port = srv->bind();
    thread = std::thread([this] { srv->run(); });
  }
  ~LimitServer() {
    srv->stop();
    thread.join();
  }
};

struct Limit {
  std::string cli, field, value;
};
void PrintTo(const Limit& l, std::ostream* os) {
  *os << l.cli << " " << l.value;
}

class SharedLimit : public DropInCli, public ::testing::WithParamInterface<Limit> {};

// One test per limit: `drama say` (exit 2) and the server (400) refuse it with the same rule.
TEST_P(SharedLimit, SayAndTheServerGiveTheSameAnswer) {
  const Limit& l = GetParam();
  LimitServer s(dir() / "limit-voices");
  const CliResult r = run_drama(
      "say hi -o " + quote((dir() / "lim.wav").string()) + " " + l.cli + " " + l.value + weights(),
      dir());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  ASSERT_NE(r.err.find(l.cli), std::string::npos) << r.err;
  const std::string cli_rule = r.err.substr(r.err.find(l.cli) + l.cli.size());
  Reply h =
      post(s.port, "/v1/audio/speech", R"({"input": "hi", ")" + l.field + "\": " + l.value + "}");
  EXPECT_EQ(h.status, 400) << h.body;
  EXPECT_EQ(h.json()["error"]["param"], l.field);
  const std::string msg = h.json()["error"]["message"];
  const std::string http_rule = msg.substr(msg.find(l.field) + l.field.size() + 1);
  EXPECT_EQ(cli_rule, http_rule + "\n") << l.cli << " vs " << l.field;
  EXPECT_FALSE(fs::exists(dir() / "lim.wav"));
}

INSTANTIATE_TEST_SUITE_P(
    Limits, SharedLimit,
    ::testing::Values(Limit{"--temperature", "temperature", "5"},
                      Limit{"--temperature", "temperature", "-0.5"}, Limit{"--top-p", "top_p", "0"},
                      Limit{"--top-p", "top_p", "1.5"}, Limit{"--top-k", "top_k", "100001"},
                      Limit{"--gamma", "cfg_scale", "11"},
                      Limit{"--max-duration", "max_duration_s", "61"},
                      Limit{"--max-duration", "max_duration_s", "0"},
                      Limit{"--speed", "speed", "5"}, Limit{"--speed", "speed", "0.1"}));

// The voice writer's reference limits: `drama voice write` (exit 1, no file) and
// POST /v1/audio/voices (400, nothing stored) refuse 0.5 s and 61 s with the same rule.
class ReferenceLimit : public DropInCli, public ::testing::WithParamInterface<double> {};

TEST_P(ReferenceLimit, VoiceWriteAndTheServerGiveTheSameAnswer) {
  const double seconds = GetParam();
  LimitServer s(dir() / "limit-voices");
  std::vector<float> pcm = test_signal(int64_t(seconds * 8000), 8000, 5);
  const fs::path ref = dir() / "limit-ref.wav";
  write_audio_file(ref, pcm, 8000, AudioFormat::Wav);
  const CliResult r = run_drama("voice write " + quote(ref.string()) + " --transcript t -o " +
                                    quote((dir() / "lim.voice").string()) + weights(),
                                dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "lim.voice"));
  ASSERT_NE(r.err.find("; a reference"), std::string::npos) << r.err;
  const std::string cli_rule = r.err.substr(r.err.find("; a reference"));
  httplib::Client c("127.0.0.1", s.port);
  const std::string wav = read_text_file(ref);
  auto up =
      c.Post("/v1/audio/voices", httplib::MultipartFormDataItems{{"audio_sample", wav, "r.wav", ""},
                                                                 {"name", "n", "", ""},
                                                                 {"ref_text", "t", "", ""}});
  ASSERT_TRUE(up);
  EXPECT_EQ(up->status, 400);
  const std::string msg = nlohmann::json::parse(up->body)["error"]["message"];
  EXPECT_EQ(cli_rule, msg.substr(msg.find("; a reference")) + "\n");
  EXPECT_TRUE(fs::is_empty(dir() / "limit-voices"));
}

INSTANTIATE_TEST_SUITE_P(References, ReferenceLimit, ::testing::Values(0.5, 61.0));

TEST_F(DropInCli, ASecondServeOnAHeldPortExitsWithOneLine) {
  ServerProcess first(
      {"--checkpoint", ckpt().string(), "--manifest", (ckpt() / "manifest.json").string(),
       "--threads", "1", "--voices", (dir() / "v1").string()},
      dir() / "first.log");
  ASSERT_TRUE(first.ready()) << first.log_text();
  // Its own lock directory, so that the port (not the device lock) is what refuses it.
  setenv("DRAMA_LOCK_DIR", (dir() / "other-locks").c_str(), 1);
  const fs::path log = dir() / "second.log";
  const int rc = run_command(
      {"/usr/bin/timeout", "120", env_or("DRAMA_BIN", "drama"), "serve", "--port",
       std::to_string(first.port()), "--checkpoint", ckpt().string(), "--manifest",
       (ckpt() / "manifest.json").string(), "--threads", "1", "--voices", (dir() / "v2").string()},
      log);
  unsetenv("DRAMA_LOCK_DIR");
  const std::string out = read_text_file(log);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos)
      << out;
  int refusal_lines = 0;
  for (size_t at = 0; (at = out.find("drama: ", at)) != std::string::npos; ++at) ++refusal_lines;
  EXPECT_EQ(refusal_lines, 2) << out;  // "drama: checkpoint ..." then the one refusal
  EXPECT_EQ(get(first.port(), "/health").status, 200);
  EXPECT_EQ(first.terminate(), 0);
}

}  // namespace
}  // namespace drama::testing

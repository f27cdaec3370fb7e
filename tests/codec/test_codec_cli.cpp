// `drama codec encode/decode` and `drama voice write` end to end on a tiny random codec, and
// every refusal: one clear line on stderr, exit 1 (2 for bad arguments), no output file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include "audio/audio_io.h"
#include "codec_testing.h"
#include "format/voice.h"
#include "util/fs.h"

namespace drama {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int status = -1;
  std::string err;
};

CliResult drama(const std::string& args, const fs::path& dir) {
  const char* bin = std::getenv("DRAMA_BIN");
  if (!bin) throw std::runtime_error("DRAMA_BIN is not set");
  const fs::path err_file = dir / "stderr.txt";
  const std::string cmd = std::string(bin) + " " + args + " 2>" + err_file.string() + " >/dev/null";
  CliResult r;
  const int raw = std::system(cmd.c_str());
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = read_text_file(err_file);
  return r;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class CodecCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir();
    testing::write_tiny_codec(scratch_->path() / "codec", 11);
  }
  static void TearDownTestSuite() { delete scratch_; }
  static fs::path dir() { return scratch_->path(); }
  static std::string codec_args() {
    return " --codec " + (dir() / "codec").string() + " --num-codebooks 8 --threads 1";
  }
  static fs::path wav(const std::string& name, double seconds, float amp = 0.3f,
                      int64_t rate = 16000) {
    auto x = testing::test_signal(static_cast<int64_t>(seconds * rate), rate, 4);
    for (auto& v : x) v *= amp / 0.3f;
    const fs::path p = dir() / name;
    write_audio_file(p, x, rate, AudioFormat::Wav);
    return p;
  }
  // Expects a refusal: the exit status, one line naming the problem, and no output file.
  static void expect_refusal(const std::string& args, const fs::path& out, int status,
                             const std::string& needle) {
    const CliResult r = drama(args, dir());
    EXPECT_EQ(r.status, status) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
    EXPECT_FALSE(fs::exists(out)) << out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out.parent_path(), ec))
      EXPECT_EQ(e.path().filename().string().find(out.filename().string() + "."), std::string::npos)
          << "left behind: " << e.path();
  }
  static testing::ScratchDir* scratch_;
};
testing::ScratchDir* CodecCli::scratch_ = nullptr;

TEST_F(CodecCli, EncodeDecodeVoiceWrite) {
  const fs::path in = wav("speech.wav", 1.5);
  const fs::path codes = dir() / "speech.codes";
  CliResult r =
      drama("codec encode " + in.string() + " -o " + codes.string() + codec_args(), dir());
  ASSERT_EQ(r.status, 0) << r.err;
  const Voice c = read_codes(codes);
  EXPECT_EQ(c.num_codebooks, 8);
  EXPECT_EQ(c.frames, 19);  // ceil(1.5 s * 24000 / 1920) = ceil(18.75)
  EXPECT_EQ(c.codec_sha256, sha256_file(dir() / "codec" / "model.safetensors"));
  for (const char* ext : {"wav", "flac", "pcm"}) {
    const fs::path out = dir() / (std::string("decoded.") + ext);
    r = drama("codec decode " + codes.string() + " -o " + out.string() + codec_args(), dir());
    ASSERT_EQ(r.status, 0) << r.err;
    const auto bytes = read_file(out);
    if (std::string(ext) == "pcm") {
      EXPECT_EQ(bytes.size(), 19u * 1920u * 2u);
    } else {
      EXPECT_EQ(read_audio_memory(bytes, ext).mono.size(), 19u * 1920u);
    }
  }
  const fs::path voice = dir() / "v.voice";
  r = drama("voice write " + in.string() + " --transcript 'Hello there.' -o " + voice.string() +
                codec_args(),
            dir());
  ASSERT_EQ(r.status, 0) << r.err;
  const Voice v = read_voice(voice);
  EXPECT_EQ(v.transcript, "Hello there.");
  EXPECT_EQ(v.codes, c.codes);  // same audio, same codec: same codes
}

TEST_F(CodecCli, VoiceWriteRefusals) {
  const fs::path out = dir() / "refused.voice";
  const std::string tail = " --transcript 'Some words.' -o " + out.string() + codec_args();
  expect_refusal("voice write " + (dir() / "missing.wav").string() + tail, out, 1, "missing.wav");
  std::ofstream(dir() / "text.wav") << "RIFF but not really audio, just words";
  expect_refusal("voice write " + (dir() / "text.wav").string() + tail, out, 1, "text.wav");
  const fs::path full = wav("full.wav", 2.0);
  auto bytes = read_file(full);
  bytes.resize(bytes.size() / 2);
  write_file_atomic(dir() / "cut.wav", bytes);
  expect_refusal("voice write " + (dir() / "cut.wav").string() + tail, out, 1, "truncated");
  write_audio_file(dir() / "empty.wav", std::vector<float>{}, 16000, AudioFormat::Wav);
  expect_refusal("voice write " + (dir() / "empty.wav").string() + tail, out, 1, "no samples");
  expect_refusal("voice write " + wav("silent.wav", 2.0, 0.0f).string() + tail, out, 1, "silent");
  expect_refusal("voice write " + wav("short.wav", 0.5).string() + tail, out, 1, "at least");
  expect_refusal("voice write " + wav("long.wav", 61.0, 0.3f, 8000).string() + tail, out, 1,
                 "at most");
  expect_refusal(
      "voice write " + full.string() + " --transcript '  ' -o " + out.string() + codec_args(), out,
      2, "transcript");
  // Without --codec the weight options apply (the default model when none is given:
  // tests/cli/test_dropin_cli.cpp); --codec with them is refused.
  expect_refusal("voice write " + full.string() + " --transcript 'x' -o " + out.string() +
                     codec_args() + " --checkpoint " + dir().string(),
                 out, 2, "--checkpoint");
}

TEST_F(CodecCli, DecodeRefusesForeignCodes) {
  const fs::path in = wav("ref.wav", 1.2);
  const fs::path codes = dir() / "ref.codes";
  ASSERT_EQ(
      drama("codec encode " + in.string() + " -o " + codes.string() + codec_args(), dir()).status,
      0);
  const fs::path out = dir() / "refused.wav";
  Voice c = read_codes(codes);
  c.codec_sha256 = std::string(64, '0');
  write_codes(dir() / "foreign.codes", c);
  expect_refusal(
      "codec decode " + (dir() / "foreign.codes").string() + " -o " + out.string() + codec_args(),
      out, 1, "another codec");
  c = read_codes(codes);
  c.num_codebooks = 4;
  c.codes.resize(static_cast<size_t>(c.frames * 4));
  write_codes(dir() / "four.codes", c);
  expect_refusal(
      "codec decode " + (dir() / "four.codes").string() + " -o " + out.string() + codec_args(), out,
      1, "codebooks");
  c = read_codes(codes);
  c.codes[5] = 4096;  // past the tiny codec's 64 entries
  write_codes(dir() / "range.codes", c);
  expect_refusal(
      "codec decode " + (dir() / "range.codes").string() + " -o " + out.string() + codec_args(),
      out, 1, "outside");
  expect_refusal(
      "codec decode " + codes.string() + " -o " + (dir() / "x.aac").string() + codec_args(),
      dir() / "x.aac", 2, "aac");
}

}  // namespace
}  // namespace drama

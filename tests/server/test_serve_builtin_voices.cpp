// Built-in voices end to end (docs/server.md, "Built-in voices"): `drama voice write --into` puts
// a voice into the tiny random checkpoint and re-pins its manifest; a real `drama serve` lists it
// with "built_in": true, speaks with it exactly as with the same voice stored by a user, refuses
// to delete it (403, still listed and usable) or to give its id to an upload; `drama say --voice
// ID` takes it; a flipped byte in it, or an unlisted voice file beside it, stops serve and say at
// load with one line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "audio/audio_io.h"
#include "codec/codec_testing.h"
#include "format/manifest.h"
#include "format/voice.h"
#include "server/base64.h"
#include "server/http_test_util.h"
#include "server/server_process.h"
#include "support/drama_cli.h"
#include "support/scratch_dir.h"
#include "util/fs.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTranscript = "The held out words of speaker A.";

void flip_byte(const fs::path& p, size_t from_end) {
  std::vector<uint8_t> b = read_file(p);
  b.at(b.size() - from_end) ^= 0x01;
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

class ServeBuiltinVoices : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir("serve-builtin");
    // Own cache (device locks, default voices) so parallel tests and other servers don't collide.
    setenv("DRAMA_CACHE", (dir() / "cache").c_str(), 1);
    CliResult r = run_drama("make-checkpoint --config " +
                                quote(env_or("DRAMA_SOURCE_DIR", ".") + "/configs/tiny.json") +
                                " --seed 1 --nvfp4 -o " + quote(ckpt().string()),
                            dir());
    ASSERT_EQ(r.status, 0) << r.err;
    write_audio_file(ref_wav(), test_signal(2 * 24000, 24000, 3), 24000, AudioFormat::Wav);
    before_ = new Manifest(load_manifest(ckpt() / "manifest.json"));
    r = run_drama("voice write " + quote(ref_wav().string()) + " --transcript " +
                      quote(kTranscript) + " --into " + quote(ckpt().string()) +
                      " --id corpus_a --name 'Corpus speaker A' --threads 1",
                  dir());
    ASSERT_EQ(r.status, 0) << r.err;
    // The same voice as a file, from the same checkpoint's codec.
    r = run_drama("voice write " + quote(ref_wav().string()) + " --transcript " +
                      quote(kTranscript) + " -o " + quote(user_voice().string()) + weights(),
                  dir());
    ASSERT_EQ(r.status, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete before_;
    delete scratch_;
  }
  static fs::path dir() { return scratch_->path(); }
  static fs::path ckpt() { return dir() / "tiny"; }
  static fs::path ref_wav() { return dir() / "ref.wav"; }
  static fs::path user_voice() { return dir() / "user_a.voice"; }
  static std::string weights(const fs::path& c = ckpt()) {
    return " --checkpoint " + quote(c.string()) + " --manifest " +
           quote((c / "manifest.json").string()) + " --threads 1";
  }
  static std::vector<std::string> serve_args(const fs::path& c, const std::string& voices) {
    return {"--checkpoint", c.string(), "--manifest",  (c / "manifest.json").string(),
            "--voices",     voices,     "--backend",   "cpu",
            "--threads",    "2",        "--max-queue", "2"};
  }
  // A copy of the checkpoint to damage.
  static fs::path copy_of(const std::string& name) {
    const fs::path to = dir() / name;
    fs::copy(ckpt(), to, fs::copy_options::recursive);
    return to;
  }
  static ScratchDir* scratch_;
  static Manifest* before_;
};
ScratchDir* ServeBuiltinVoices::scratch_ = nullptr;
Manifest* ServeBuiltinVoices::before_ = nullptr;

TEST_F(ServeBuiltinVoices, VoiceWriteIntoAddsTheVoiceAndRePinsTheManifest) {
  const Manifest m = load_manifest(ckpt() / "manifest.json");
  ASSERT_EQ(m.files.size(), before_->files.size() + 2);
  EXPECT_TRUE(verify_directory(ckpt(), m).ok());
  EXPECT_EQ(m.name, before_->name);
  EXPECT_EQ(m.revision, content_revision(m.files));
  EXPECT_NE(m.revision, before_->revision);
  const Voice builtin = read_voice(ckpt() / "voices" / "corpus_a.voice");
  EXPECT_EQ(builtin.transcript, kTranscript);
  EXPECT_EQ(builtin.codes, read_voice(user_voice()).codes);  // same audio, same codec
  EXPECT_EQ(json::parse(read_text_file(ckpt() / "voices" / "corpus_a.json")),
            (json{{"name", "Corpus speaker A"}, {"created", 0}}));

  // Refusals change nothing: bad arguments exit 2, a taken id exits 1.
  const std::string head =
      "voice write " + quote(ref_wav().string()) + " --transcript " + quote(kTranscript);
  const std::string into = " --into " + quote(ckpt().string());
  for (const auto& [args, status, needle] : std::vector<std::tuple<std::string, int, std::string>>{
           {head + into, 2, "--into needs --id"},
           {head + into + " --id 'bad id'", 2, "--id bad id"},
           {head + into + " --id b" + weights(), 2, "leave out --checkpoint"},
           {head + into + " --id b -o x.voice", 2, "one of them"},
           {head + " --id b -o x.voice", 2, "--id goes with --into"},
           {head + into + " --id corpus_a", 1, "built-in voice 'corpus_a' already exists"}}) {
    const CliResult r = run_drama(args, dir());
    EXPECT_EQ(r.status, status) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in " << r.err;
  }
  EXPECT_EQ(manifest_to_json(load_manifest(ckpt() / "manifest.json")), manifest_to_json(m));
  EXPECT_FALSE(fs::exists(dir() / "x.voice"));
}

TEST_F(ServeBuiltinVoices, ServeListsUsesAndProtectsThem) {
  const fs::path voices = dir() / "voices-serve";
  ServerProcess s(serve_args(ckpt(), voices.string()), dir() / "serve.log");
  ASSERT_TRUE(s.ready()) << s.log_text();
  EXPECT_NE(s.log_text().find("built-in voices: corpus_a"), std::string::npos) << s.log_text();

  // The same reference, stored by a user through the voice writer of the server.
  const std::string wav = read_text_file(ref_wav());
  httplib::Client cli("127.0.0.1", s.port());
  cli.set_read_timeout(120, 0);
  auto up = cli.Post("/v1/audio/voices",
                     httplib::MultipartFormDataItems{{"audio_sample", wav, "ref.wav", "audio/wav"},
                                                     {"name", "User A", "", ""},
                                                     {"id", "user_a", "", ""},
                                                     {"ref_text", kTranscript, "", ""}});
  ASSERT_TRUE(up && up->status == 200) << (up ? up->body : "no reply");
  EXPECT_EQ(json::parse(up->body)["built_in"], false);
  EXPECT_EQ(read_voice(voices / "user_a.voice").codes,
            read_voice(ckpt() / "voices" / "corpus_a.voice").codes);

  json list = get(s.port(), "/v1/audio/voices").json();
  ASSERT_EQ(list["voices"].size(), 2u) << list.dump();
  const json& b = list["voices"][0];
  EXPECT_EQ(b["id"], "corpus_a");
  EXPECT_EQ(b["name"], "Corpus speaker A");
  EXPECT_EQ(b["transcript"], kTranscript);
  EXPECT_EQ(b["built_in"], true);
  EXPECT_GT(b["frames"].get<int>(), 0);
  EXPECT_EQ(list["voices"][1]["id"], "user_a");
  EXPECT_EQ(list["voices"][1]["built_in"], false);

  auto speech = [&](const std::string& voice) {
    return post(s.port(), "/v1/audio/speech",
                R"({"input": "Speak with the built-in voice.", "seed": 77, "max_duration_s": 1)" +
                    voice + "}");
  };
  const Reply builtin = speech(R"(, "voice": "corpus_a")");
  ASSERT_EQ(builtin.status, 200) << builtin.body;
  ASSERT_GT(wav_data(builtin.body).size(), 0u);
  EXPECT_EQ(speech(R"(, "voice": "user_a")").body, builtin.body);
  const std::string b64 =
      server::base64_encode({reinterpret_cast<const uint8_t*>(wav.data()), wav.size()});
  EXPECT_EQ(speech(R"(, "ref_audio": ")" + b64 + R"(", "ref_text": ")" + kTranscript + "\"").body,
            builtin.body);
  EXPECT_NE(speech("").body, builtin.body);  // the voice is used

  // DELETE is refused and changes nothing.
  const Reply del = get(s.port(), "/v1/audio/voices/corpus_a", "DELETE");
  EXPECT_EQ(del.status, 403) << del.body;
  EXPECT_EQ(del.json()["error"]["code"], "voice_built_in");
  EXPECT_EQ(get(s.port(), "/v1/audio/voices").json()["voices"].size(), 2u);
  EXPECT_EQ(speech(R"(, "voice": "corpus_a")").body, builtin.body);
  EXPECT_TRUE(verify_directory(ckpt(), load_manifest(ckpt() / "manifest.json")).ok());
  // Its id is not given to an upload.
  const json clash = {
      {"name", "Clash"}, {"id", "corpus_a"}, {"ref_text", kTranscript}, {"audio_base64", b64}};
  const Reply taken = post(s.port(), "/v1/audio/voices", clash.dump());
  EXPECT_EQ(taken.status, 400) << taken.body;
  EXPECT_EQ(taken.json()["error"]["code"], "voice_exists");
  EXPECT_FALSE(fs::exists(voices / "corpus_a.voice"));
  EXPECT_EQ(s.terminate(), 0);
}

TEST_F(ServeBuiltinVoices, SayTakesABuiltInIdLikeAVoiceFile) {
  const std::string say = "say 'Speak with the built-in voice.' --seed 77 --max-duration 1";
  CliResult r = run_drama(
      say + " --voice corpus_a -o " + quote((dir() / "a.wav").string()) + weights(), dir());
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_drama(say + " --voice " + quote(user_voice().string()) + " -o " +
                    quote((dir() / "b.wav").string()) + weights(),
                dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(dir() / "a.wav"), read_file(dir() / "b.wav"));
  r = run_drama(say + " -o " + quote((dir() / "c.wav").string()) + weights(), dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(read_file(dir() / "a.wav"), read_file(dir() / "c.wav"));

  r = run_drama(say + " --voice nobody -o x.wav" + weights(), dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 2) << r.err;  // the checkpoint line, then the refusal
  EXPECT_NE(r.err.find("no built-in voice 'nobody' (built-in voices: corpus_a)"), std::string::npos)
      << r.err;
  // A file in the working directory with a built-in voice's name: ambiguous, refused.
  fs::copy_file(user_voice(), dir() / "corpus_a");
  r = run_drama(say + " --voice corpus_a -o x.wav" + weights(), dir());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("write ./corpus_a for the file"), std::string::npos) << r.err;
  r = run_drama(say + " --voice ./corpus_a -o " + quote((dir() / "d.wav").string()) + weights(),
                dir());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(dir() / "a.wav"), read_file(dir() / "d.wav"));
  fs::remove(dir() / "corpus_a");
  EXPECT_FALSE(fs::exists(dir() / "x.wav"));
}

TEST_F(ServeBuiltinVoices, AFlippedByteOrAnUnlistedVoiceFileStopsTheLoad) {
  const fs::path tampered = copy_of("tampered");
  flip_byte(tampered / "voices" / "corpus_a.voice", 5);  // inside the codes
  {
    ServerProcess s(serve_args(tampered, (dir() / "voices-t").string()), dir() / "tampered.log");
    EXPECT_FALSE(s.ready());
    EXPECT_EQ(s.terminate(), 1);
    const std::string log = s.log_text();
    EXPECT_EQ(count_lines(log), 1) << log;
    EXPECT_NE(log.find("voices/corpus_a.voice: sha256 mismatch"), std::string::npos) << log;
  }
  CliResult r =
      run_drama("say 'x' -o " + quote((dir() / "t.wav").string()) + weights(tampered), dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("voices/corpus_a.voice: sha256 mismatch"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "t.wav"));

  // An unlisted voice beside the listed one: verification alone ignores unlisted files, the
  // built-in voice loader does not.
  const fs::path extra = copy_of("extra");
  fs::copy_file(extra / "voices" / "corpus_a.voice", extra / "voices" / "extra.voice");
  fs::copy_file(extra / "voices" / "corpus_a.json", extra / "voices" / "extra.json");
  {
    ServerProcess s(serve_args(extra, (dir() / "voices-e").string()), dir() / "extra.log");
    EXPECT_FALSE(s.ready());
    EXPECT_EQ(s.terminate(), 1);
    const std::string log = s.log_text();
    EXPECT_EQ(count_lines(log), 2) << log;  // the checkpoint line, then the refusal
    EXPECT_NE(log.find("voices/extra.json is not listed in manifest"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace drama::testing

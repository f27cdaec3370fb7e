// The bundled default model (issue 14, docs/decisions.md "Files"): when models/drama-mini is there
// (here: $DRAMA_MODELS_DIR, the test override of where it is looked for), `say`, `voice write` and
// `serve` default to it, verified in place against the shipped checkpoints/drama-mini.json and
// never copied into the cache; a tampered or partial one is refused with one line naming the file
// and left as it is; without it the default stays the random "mini" model, and `--weights mini`
// picks that one either way. The bundled directory is the source tree's models/drama-mini when the
// shipped manifest is the trained one, else (the placeholder manifest shipped until training ends)
// the random checkpoint it pins: `drama make-checkpoint --config tools/train/drama-mini.json --seed
// 1 --nvfp4`.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "audio/audio_io.h"
#include "codec/codec_testing.h"
#include "format/manifest.h"
#include "server/http_test_util.h"
#include "server/server_process.h"
#include "support/drama_cli.h"
#include "support/scratch_dir.h"
#include "util/fs.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPlaceholderRepo = "local/drama-mini-placeholder";

// Runs drama in `cwd` with the bundled models looked for under `models` only.
CliResult drama(const std::string& args, const fs::path& models, const fs::path& cwd) {
  return run_drama(args, cwd, "DRAMA_MODELS_DIR=" + quote(models.string()) + " ");
}

class BundledDefault : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir("bundled-default");
    setenv("DRAMA_CACHE", (dir() / "cache").c_str(), 1);
    setenv("DRAMA_LOCK_DIR", (dir() / "locks").c_str(), 1);
    const std::string src = env_or("DRAMA_SOURCE_DIR", ".");
    pin_ = new Manifest(load_manifest(src + "/checkpoints/drama-mini.json"));
    fs::create_directories(models());
    if (pin_->repo == kPlaceholderRepo) {
      const CliResult r =
          drama("make-checkpoint --config " + quote(src + "/tools/train/drama-mini.json") +
                    " --seed 1 --nvfp4 -o " + quote(bundled().string()),
                dir() / "none", dir());
      ASSERT_EQ(r.status, 0) << r.err;
    } else {
      const fs::path trained = fs::path(src) / "models" / "drama-mini";
      if (!fs::is_directory(trained))
        GTEST_SKIP() << "checkpoints/drama-mini.json pins a trained model, but " << trained
                     << " is not in this tree";
      fs::copy(trained, bundled(), fs::copy_options::recursive);
    }
    write_audio_file(dir() / "ref.wav", test_signal(2 * 24000, 24000, 3), 24000, AudioFormat::Wav);
  }
  static void TearDownTestSuite() {
    delete pin_;
    delete scratch_;
  }
  void SetUp() override {
    if (!fs::is_directory(bundled())) GTEST_SKIP() << "no bundled model to test";
  }
  static fs::path dir() { return scratch_->path(); }
  static fs::path models() { return dir() / "models"; }
  static fs::path bundled() { return models() / "drama-mini"; }
  static std::string pinned_label() { return "pinned:" + pin_->repo + "@" + pin_->revision; }
  // A copy of the bundled model under its own models folder, to damage.
  static fs::path copy_models(const std::string& name) {
    const fs::path root = dir() / name;
    fs::create_directories(root);
    fs::copy(bundled(), root / "drama-mini", fs::copy_options::recursive);
    return root;
  }
  static std::vector<std::string> builtin_ids() {
    std::vector<std::string> ids;
    for (const auto& f : pin_->files)
      if (f.path.rfind("voices/", 0) == 0 && fs::path(f.path).extension() == ".voice")
        ids.push_back(fs::path(f.path).stem());
    return ids;
  }
  static ScratchDir* scratch_;
  static Manifest* pin_;
};
ScratchDir* BundledDefault::scratch_ = nullptr;
Manifest* BundledDefault::pin_ = nullptr;

TEST_F(BundledDefault, SayAndVoiceWriteDefaultToItReadInPlace) {
  CliResult r = drama("say Hello --backend cpu --threads 1 --seed 1 --max-frames 4 -o a.wav",
                      models(), dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("drama: checkpoint " + bundled().string() + " (" + pinned_label() + ")"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir() / "cache" / pin_->name)) << "copied into the cache";
  r = drama("say Hello --backend cpu --threads 1 --seed 1 --max-frames 4 -o b.wav", models(),
            dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(dir() / "a.wav"), read_file(dir() / "b.wav"));

  r = drama("voice write ref.wav --transcript 'The held out words.' --threads 1 -o v.voice",
            models(), dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("(" + pinned_label() + ")"), std::string::npos) << r.err;
  r = drama("say Hello --voice v.voice --gamma 1.5 --threads 1 --seed 1 --max-frames 4 -o c.wav",
            models(), dir());
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(BundledDefault, ServeDefaultsToItAndListsItsBuiltInVoices) {
  setenv("DRAMA_MODELS_DIR", models().c_str(), 1);
  ServerProcess s({"--backend", "cpu", "--threads", "1", "--voices", (dir() / "voices").string()},
                  dir() / "serve.log");
  unsetenv("DRAMA_MODELS_DIR");
  ASSERT_TRUE(s.ready()) << s.log_text();
  const json health = get(s.port(), "/health").json();
  EXPECT_EQ(health["provenance"], pinned_label()) << health.dump();
  const json list = get(s.port(), "/v1/audio/voices").json();
  std::vector<std::string> listed;
  for (const auto& v : list["voices"]) {
    EXPECT_EQ(v["built_in"], true) << v.dump();
    listed.push_back(v["id"]);
  }
  EXPECT_EQ(listed, builtin_ids()) << list.dump();
  EXPECT_EQ(s.terminate(), 0);
}

TEST_F(BundledDefault, TamperedOrPartialIsRefusedWithOneLineAndLeftAsItIs) {
  const fs::path tampered = copy_models("tampered");
  const fs::path config = tampered / "drama-mini" / "config.json";
  std::string text = read_text_file(config);
  text.back() = text.back() == ' ' ? '\n' : ' ';
  std::ofstream(config, std::ios::binary | std::ios::trunc) << text;
  CliResult r = drama("say Hello --backend cpu --threads 1 -o t.wav", tampered, dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("config.json: sha256 mismatch"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "t.wav"));
  EXPECT_EQ(read_text_file(config), text);  // not repaired

  const fs::path partial = copy_models("partial");
  fs::remove(partial / "drama-mini" / "codec" / "model.safetensors");
  r = drama("say Hello --backend cpu --threads 1 -o p.wav", partial, dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("codec/model.safetensors: missing"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(partial / "drama-mini" / "codec" / "model.safetensors"));  // no repair
  EXPECT_FALSE(fs::exists(dir() / "cache" / pin_->name));                            // no copy
}

TEST_F(BundledDefault, WithoutItOrWithWeightsMiniTheRandomMiniModelRuns) {
  const std::string mini = "(pinned:local/drama-3-mini-random@";
  CliResult r = drama("say Hello --backend cpu --threads 1 --seed 1 --max-frames 2 -o m.wav",
                      dir() / "no-models", dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(mini), std::string::npos) << r.err;
  r = drama("say Hello --weights mini --backend cpu --threads 1 --seed 1 --max-frames 2 -o n.wav",
            models(), dir());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(mini), std::string::npos) << r.err;
  EXPECT_EQ(read_file(dir() / "m.wav"), read_file(dir() / "n.wav"));
  // Asked for by name when it is not bundled: one line saying where it was looked for.
  r = drama("say Hello --weights drama-mini --backend cpu -o x.wav", dir() / "no-models", dir());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(
      r.err.find("none was found (looked in: " + (dir() / "no-models" / "drama-mini").string()),
      std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace drama::testing

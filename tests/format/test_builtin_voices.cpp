// Built-in voices of a checkpoint (docs/checkpoints.md, "Built-in voices"): adding one re-pins
// the manifest (round trip, content-derived revision, same input same bytes); loading verifies
// every file under voices/ against the manifest (a flipped byte, an unlisted or stray file, a
// missing half, a voice that does not fit the model are each one clear error); quantize carries
// them over.
#include <gtest/gtest.h>

#include <fstream>

#include "format/builtin_voices.h"
#include "format/config.h"
#include "format/manifest.h"
#include "format/quantize_checkpoint.h"
#include "format/random_checkpoint.h"
#include "support/scratch_dir.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json tiny_config() {
  const char* src = std::getenv("DRAMA_SOURCE_DIR");
  return json::parse(read_text_file(fs::path(src ? src : ".") / "configs" / "tiny.json"));
}

// A voice that fits `dir`'s checkpoint (tiny: 4 codebooks of 64 at 12.5 Hz, 24 kHz).
Voice fitting_voice(const fs::path& dir, uint32_t seed, int64_t frames = 7) {
  const Drama3Config c = load_drama3_config(dir / "config.json");
  Voice v;
  v.frames = frames;
  v.num_codebooks = c.audio.num_codebooks;
  v.sample_rate = c.audio.sample_rate;
  v.frame_rate = c.audio.frame_rate;
  v.codec_sha256 = sha256_file(dir / "codec" / "model.safetensors");
  v.transcript = "Built-in voice number " + std::to_string(seed) + ".";
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < frames * v.num_codebooks; ++i) {
    x = x * 1664525u + 1013904223u;
    v.codes.push_back(int32_t((x >> 8) % uint32_t(c.audio.codebook_size)));
  }
  return v;
}

// Runs `f` and returns the message of the drama::Error it throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class BuiltinVoices : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomCheckpointOptions o;
    o.config = tiny_config();
    o.seed = 1;
    o.nvfp4 = true;
    write_random_checkpoint(o, ckpt());
  }
  fs::path ckpt() const { return scratch_.path() / "tiny"; }
  Manifest manifest() const { return load_manifest(ckpt() / "manifest.json"); }
  // Adds voice `id` and checks the returned manifest is the one on disk.
  Manifest add(const std::string& id, const Voice& v, const std::string& name = "",
               int64_t created = 0) {
    Manifest m = add_builtin_voice(ckpt(), manifest(), NewBuiltinVoice{id, name, created, v});
    EXPECT_EQ(manifest_to_json(m), manifest_to_json(manifest()));
    return m;
  }
  static void flip_byte(const fs::path& p, size_t at) {
    std::vector<uint8_t> b = read_file(p);
    b.at(at) ^= 0x01;
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  testing::ScratchDir scratch_{"builtin-voices"};
};

TEST_F(BuiltinVoices, NoVoicesDirectoryMeansNone) {
  EXPECT_TRUE(load_builtin_voices(ckpt(), manifest()).empty());
}

TEST_F(BuiltinVoices, AddRePinsTheManifestAndLoadsBack) {
  const Manifest before = manifest();
  const Voice a = fitting_voice(ckpt(), 1), b = fitting_voice(ckpt(), 2, 3);
  add("alice", a, "Alice (corpus speaker 1)", 1700000000);
  const Manifest m = add("bob", b);

  // Every file listed before is still listed, unchanged; the four voice files are added.
  ASSERT_EQ(m.files.size(), before.files.size() + 4);
  for (const auto& f : before.files) {
    bool same = false;
    for (const auto& g : m.files) same |= g.path == f.path && g.sha256 == f.sha256;
    EXPECT_TRUE(same) << f.path;
  }
  for (size_t i = 1; i < m.files.size(); ++i) EXPECT_LT(m.files[i - 1].path, m.files[i].path);
  EXPECT_EQ(m.name, before.name);
  EXPECT_EQ(m.weights, before.weights);
  EXPECT_EQ(m.repo, before.repo);
  EXPECT_EQ(m.revision, content_revision(m.files));
  EXPECT_NE(m.revision, before.revision);
  EXPECT_TRUE(verify_directory(ckpt(), m).ok());
  // The manifest round trip: what is written parses back to the same manifest.
  EXPECT_EQ(manifest_to_json(parse_manifest(manifest_to_json(m), "round trip")),
            manifest_to_json(m));

  const std::vector<BuiltinVoice> got = load_builtin_voices(ckpt(), m);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, "alice");
  EXPECT_EQ(got[0].name, "Alice (corpus speaker 1)");
  EXPECT_EQ(got[0].created, 1700000000);
  EXPECT_EQ(got[0].voice->codes, a.codes);
  EXPECT_EQ(got[0].voice->transcript, a.transcript);
  EXPECT_EQ(got[1].id, "bob");
  EXPECT_EQ(got[1].name, "bob");  // the id when no name is given
  EXPECT_EQ(got[1].created, 0);
  EXPECT_EQ(got[1].voice->frames, 3);
  EXPECT_EQ(json::parse(read_text_file(ckpt() / "voices" / "bob.json")),
            (json{{"name", "bob"}, {"created", 0}}));
}

TEST_F(BuiltinVoices, SameVoiceSameBytesSameRevision) {
  const Manifest m1 = add("alice", fitting_voice(ckpt(), 1));
  testing::ScratchDir other("builtin-voices-2");
  RandomCheckpointOptions o;
  o.config = tiny_config();
  o.seed = 1;
  o.nvfp4 = true;
  write_random_checkpoint(o, other.path() / "tiny");
  const Manifest m2 =
      add_builtin_voice(other.path() / "tiny", load_manifest(other.path() / "tiny/manifest.json"),
                        NewBuiltinVoice{"alice", "", 0, fitting_voice(ckpt(), 1)});
  EXPECT_EQ(manifest_to_json(m1), manifest_to_json(m2));
}

TEST_F(BuiltinVoices, OneFlippedByteInAVoiceFileFailsTheLoadNamingIt) {
  add("alice", fitting_voice(ckpt(), 1));
  const Manifest m = add("bob", fitting_voice(ckpt(), 2));
  const fs::path p = ckpt() / "voices" / "bob.voice";
  flip_byte(p, fs::file_size(p) - 3);  // inside the codes
  const std::string e = error_of([&] { load_builtin_voices(ckpt(), m); });
  EXPECT_NE(e.find("voices/bob.voice"), std::string::npos) << e;
  EXPECT_NE(e.find("sha256 mismatch"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // The checkpoint's verification names it too (serve and say verify before they load).
  const VerifyReport r = verify_directory(ckpt(), m);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].path, "voices/bob.voice");
  // A sidecar byte counts the same.
  flip_byte(p, fs::file_size(p) - 3);
  flip_byte(ckpt() / "voices" / "alice.json", 3);
  EXPECT_NE(error_of([&] { load_builtin_voices(ckpt(), m); }).find("voices/alice.json: sha256"),
            std::string::npos);
}

TEST_F(BuiltinVoices, UnlistedStrayAndHalfVoicesAreRefused) {
  const Manifest m = add("alice", fitting_voice(ckpt(), 1));
  const fs::path v = ckpt() / "voices";
  // An unlisted voice, even a valid one, is not loaded: the whole load fails.
  fs::copy_file(v / "alice.voice", v / "eve.voice");
  fs::copy_file(v / "alice.json", v / "eve.json");
  std::string e = error_of([&] { load_builtin_voices(ckpt(), m); });
  EXPECT_NE(e.find("voices/eve.json is not listed in manifest"), std::string::npos) << e;
  fs::remove(v / "eve.json");
  e = error_of([&] { load_builtin_voices(ckpt(), m); });
  EXPECT_NE(e.find("eve"), std::string::npos) << e;
  fs::remove(v / "eve.voice");
  // Anything else under voices/ (a left-over temporary file, another name) is refused.
  std::ofstream(v / ".alice.voice.tmp-1") << "x";
  e = error_of([&] { load_builtin_voices(ckpt(), m); });
  EXPECT_NE(e.find("voices/.alice.voice.tmp-1 does not belong in voices/"), std::string::npos) << e;
  fs::remove(v / ".alice.voice.tmp-1");
  fs::create_directory(v / "sub");
  EXPECT_NE(error_of([&] { load_builtin_voices(ckpt(), m); }).find("voices/sub"),
            std::string::npos);
  fs::remove(v / "sub");
  // A listed file that is gone.
  fs::rename(v / "alice.json", ckpt() / "alice.json");
  e = error_of([&] { load_builtin_voices(ckpt(), m); });
  EXPECT_NE(e.find("voices/alice.json is listed in manifest"), std::string::npos) << e;
  fs::rename(ckpt() / "alice.json", v / "alice.json");
  EXPECT_EQ(load_builtin_voices(ckpt(), m).size(), 1u);
}

TEST_F(BuiltinVoices, AVoiceThatDoesNotFitTheModelIsRefused) {
  const Manifest before = manifest();
  Voice wrong_k = fitting_voice(ckpt(), 1);
  wrong_k.num_codebooks = 2;  // tiny has 4
  wrong_k.frames *= 2;
  Voice foreign = fitting_voice(ckpt(), 1);
  foreign.codec_sha256 = std::string(64, 'a');
  Voice big_code = fitting_voice(ckpt(), 1);
  big_code.codes[5] = 64;  // codebook_size 64
  Voice rate = fitting_voice(ckpt(), 1);
  rate.frame_rate = 25;
  const std::pair<Voice, const char*> bad[] = {{wrong_k, "has 2 codebooks; the model uses 4"},
                                               {foreign, "not this checkpoint's codec"},
                                               {big_code, "outside the codebook"},
                                               {rate, "frame rate"}};
  for (const auto& [v, needle] : bad) {
    const Voice& voice = v;  // clang 14 lambdas cannot capture structured bindings
    const std::string e = error_of([&] { add("x", voice); });
    EXPECT_NE(e.find(needle), std::string::npos) << e;
    // Nothing written: no voices/, the manifest as it was.
    EXPECT_FALSE(fs::exists(ckpt() / "voices"));
    EXPECT_EQ(manifest_to_json(manifest()), manifest_to_json(before));
  }

  // The same mismatch in a checkpoint pinned by other means is a load error.
  fs::create_directory(ckpt() / "voices");
  write_voice(ckpt() / "voices" / "x.voice", wrong_k);
  write_text_file_atomic(ckpt() / "voices" / "x.json", R"({"name": "X"})");
  std::vector<std::string> files;
  for (const auto& f : before.files) files.push_back(f.path);
  files.push_back("voices/x.voice");
  files.push_back("voices/x.json");
  const Manifest m = pin_local_checkpoint(ckpt(), files, before.name, before.weights, before.repo);
  ASSERT_TRUE(verify_directory(ckpt(), m).ok());
  const std::string e = error_of([&] { load_builtin_voices(ckpt(), m); });
  EXPECT_NE(e.find("voices/x.voice has 2 codebooks; the model uses 4"), std::string::npos) << e;
}

TEST_F(BuiltinVoices, SidecarsAreStrict) {
  const Manifest before = manifest();
  fs::create_directory(ckpt() / "voices");
  write_voice(ckpt() / "voices" / "x.voice", fitting_voice(ckpt(), 1));
  std::vector<std::string> files;
  for (const auto& f : before.files) files.push_back(f.path);
  files.push_back("voices/x.voice");
  files.push_back("voices/x.json");
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {R"({"name": "X", "transcript": "t"})", "unknown key 'transcript'"},
           {R"({"created": 5})", "'name' must be a string"},
           {R"({"name": ""})", "1 to 256 characters"},
           {R"({"name": "X", "created": -1})", "non-negative integer"},
           {R"(["X"])", "must be a JSON object"}}) {
    write_text_file_atomic(ckpt() / "voices" / "x.json", text);
    const Manifest m =
        pin_local_checkpoint(ckpt(), files, before.name, before.weights, before.repo);
    const std::string e = error_of([&] { load_builtin_voices(ckpt(), m); });
    EXPECT_NE(e.find("voices/x.json: "), std::string::npos) << e;
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  }
}

TEST_F(BuiltinVoices, AddRefusesTakenIdsBadIdsAndForeignManifests) {
  add("alice", fitting_voice(ckpt(), 1));
  const Manifest m = manifest();
  EXPECT_NE(error_of([&] { add("alice", fitting_voice(ckpt(), 2)); }).find("already exists"),
            std::string::npos);
  EXPECT_NE(error_of([&] { add("../up", fitting_voice(ckpt(), 2)); }).find("[A-Za-z0-9_-]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              add("ok", fitting_voice(ckpt(), 2), std::string(300, 'n'));
            }).find("1 to 256"),
            std::string::npos);
  EXPECT_EQ(manifest_to_json(manifest()), manifest_to_json(m));
  // A manifest that names a real commit is never re-pinned under a revision it does not have.
  Manifest remote = m;
  remote.repo = "owner/drama";
  remote.revision = std::string(40, 'c');
  write_manifest(ckpt() / "manifest.json", remote);
  const std::string e = error_of([&] {
    add_builtin_voice(ckpt(), remote, NewBuiltinVoice{"y", "", 0, fitting_voice(ckpt(), 3)});
  });
  EXPECT_NE(e.find("not the content-derived revision"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(ckpt() / "voices" / "y.voice"));
  // A manifest.json that is not the one verified.
  write_manifest(ckpt() / "manifest.json", m);
  EXPECT_NE(
      error_of([&] {
        add_builtin_voice(ckpt(), remote, NewBuiltinVoice{"y", "", 0, fitting_voice(ckpt(), 3)});
      }).find("content-derived"),
      std::string::npos);
  Manifest stale = m;
  stale.files.pop_back();
  stale.revision = content_revision(stale.files);
  EXPECT_NE(
      error_of([&] {
        add_builtin_voice(ckpt(), stale, NewBuiltinVoice{"y", "", 0, fitting_voice(ckpt(), 3)});
      }).find("is not the manifest the checkpoint was verified against"),
      std::string::npos);
  EXPECT_FALSE(fs::exists(ckpt() / "voices" / "y.voice"));
}

TEST_F(BuiltinVoices, QuantizeCarriesThemOver) {
  testing::ScratchDir bf16dir("builtin-voices-bf16");
  const fs::path bf16 = bf16dir.path() / "tiny-bf16";
  RandomCheckpointOptions o;
  o.config = tiny_config();
  o.seed = 1;
  write_random_checkpoint(o, bf16);
  const Voice v = fitting_voice(bf16, 4);
  add_builtin_voice(bf16, load_manifest(bf16 / "manifest.json"),
                    NewBuiltinVoice{"carol", "Carol", 0, v});
  const fs::path out = bf16dir.path() / "tiny-nvfp4";
  quantize_checkpoint(bf16, out, QuantizeOptions{});
  const Manifest m = load_manifest(out / "manifest.json");
  ASSERT_TRUE(verify_directory(out, m).ok());
  const auto got = load_builtin_voices(out, m);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "Carol");
  EXPECT_EQ(got[0].voice->codes, v.codes);
  EXPECT_EQ(read_file(out / "voices" / "carol.voice"), read_file(bf16 / "voices" / "carol.voice"));
}

}  // namespace
}  // namespace drama

// Launcher policy (spec section 9): manifest selection and labels, download before the device
// lock, verification under it, refusal of incomplete or modified directories without touching them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "engine/launcher.h"
#include "fetch_fixture.h"
#include "util/error.h"

namespace drama {
namespace {

using test::LoopbackHttp;
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DeviceLock, SecondHolderInThisProcessIsRefusedNamingThePid) {
  const fs::path dir = test::fresh_dir("lock-same");
  {
    DeviceLock first("cpu", dir);
    EXPECT_EQ(read_text_file(dir / "drama-cpu.lock"), std::to_string(::getpid()) + "\n");
    const std::string msg = error_of([&] { DeviceLock second("cpu", dir); });
    EXPECT_NE(msg.find("in use by process " + std::to_string(::getpid())), std::string::npos)
        << msg;
    DeviceLock other_device("cuda-0", dir);  // another device is independent
  }
  DeviceLock again("cpu", dir);  // released on destruction
}

TEST(DeviceLock, SecondHolderInAnotherProcessIsRefusedNamingThePid) {
  const fs::path dir = test::fresh_dir("lock-fork");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c = 0;
    {
      DeviceLock held("cuda-0", dir);
      if (::write(ready[1], "r", 1) != 1) ::_exit(3);
      if (::read(release[0], &c, 1) < 0) ::_exit(4);
    }
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const std::string msg = error_of([&] { DeviceLock mine("cuda-0", dir); });
  EXPECT_NE(msg.find("in use by process " + std::to_string(child)), std::string::npos) << msg;
  ASSERT_EQ(::write(release[1], "x", 1), 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  DeviceLock after("cuda-0", dir);  // the child's exit released it
}

TEST(Select, WeightsWithoutShippedManifestAreRefusedClearly) {
  WeightsSelection s;
  s.weights = "nvfp4";
  try {
    select_manifest(s);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "no pinned manifest is shipped for weights 'nvfp4'; pass --manifest FILE");
  }
}

TEST(Select, UserManifestIsLabelledOverrideNeverPinned) {
  const auto src = test::make_source("label");
  WeightsSelection s;
  s.manifest = test::write_manifest(src.manifest, test::fresh_dir("label-m") / "m.json");
  const auto sel = select_manifest(s);
  EXPECT_FALSE(sel.pinned);
  EXPECT_EQ(sel.provenance, "override:label");
}

TEST(Select, ShippedManifestsAreLabelledPinned) {
  for (const auto& w : pinned_weights()) {
    WeightsSelection s;
    s.weights = w;
    const auto sel = select_manifest(s);
    EXPECT_TRUE(sel.pinned);
    EXPECT_EQ(sel.provenance, "pinned:" + sel.manifest.repo + "@" + sel.manifest.revision);
  }
}

struct Setup {
  test::SourceCheckpoint src;
  WeightsSelection selection;
  fs::path lock_dir;
};

Setup setup(const std::string& name, const LoopbackHttp& server) {
  Setup s{test::make_source(name), {}, test::fresh_dir(name + "-locks")};
  s.selection.manifest =
      test::write_manifest(s.src.manifest, test::fresh_dir(name + "-m") / "m.json");
  s.selection.cache_dir = test::fresh_dir(name + "-cache");
  s.selection.endpoint = server.endpoint();
  return s;
}

TEST(Resolve, MissingDefaultIsDownloadedThenVerifiedUnderTheLock) {
  LoopbackHttp server;
  auto s = setup("resolve", server);
  test::serve(server, s.src);
  const auto r = resolve_checkpoint(s.selection, "cpu", s.lock_dir);
  EXPECT_EQ(r.dir, s.selection.cache_dir / "resolve");
  EXPECT_EQ(r.provenance, "override:resolve");
  ASSERT_TRUE(r.lock);
  EXPECT_NE(error_of([&] { DeviceLock l("cpu", s.lock_dir); }).find("in use"), std::string::npos);
  // Second run: present, not downloaded again.
  const int before = server.requests();
  ResolvedCheckpoint moved = resolve_checkpoint(s.selection, "cuda-0", s.lock_dir);
  EXPECT_EQ(server.requests(), before);
}

TEST(Resolve, DownloadHappensBeforeTheLockAndVerificationUnderIt) {
  LoopbackHttp server;
  auto s = setup("order", server);
  test::serve(server, s.src);
  DeviceLock busy("cpu", s.lock_dir);
  const std::string msg = error_of([&] { resolve_checkpoint(s.selection, "cpu", s.lock_dir); });
  EXPECT_NE(msg.find("in use by process"), std::string::npos) << msg;
  // The download did not need the device, so it is done and verified.
  EXPECT_TRUE(verify_directory(s.selection.cache_dir / "order", s.src.manifest).ok());
}

TEST(Resolve, ModifiedDirectoryIsRefusedWithEveryBadFileAndLeftUntouched) {
  LoopbackHttp server;  // serves nothing: a present directory is never downloaded
  auto s = setup("modified", server);
  const fs::path dir = s.selection.cache_dir / "modified";
  fs::copy(s.src.dir, dir, fs::copy_options::recursive);
  fs::remove(dir / "model-00002-of-00002.safetensors");
  {
    std::fstream io(dir / "codec/model.safetensors",
                    std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(100);
    io.put('\x42');
  }
  const auto before = test::snapshot(dir);
  const std::string msg = error_of([&] { resolve_checkpoint(s.selection, "cpu", s.lock_dir); });
  EXPECT_NE(msg.find("model-00002-of-00002.safetensors: missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("codec/model.safetensors: sha256 mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 of 4 files bad"), std::string::npos) << msg;
  EXPECT_EQ(test::snapshot(dir), before);
  EXPECT_EQ(server.requests(), 0);
  DeviceLock free_again("cpu", s.lock_dir);  // the refusal released the lock
}

TEST(Resolve, ExplicitCheckpointIsVerifiedAndNeverDownloaded) {
  LoopbackHttp server;
  auto s = setup("explicit", server);
  test::serve(server, s.src);
  s.selection.checkpoint = s.src.dir;
  {
    const auto r = resolve_checkpoint(s.selection, "cpu", s.lock_dir);
    EXPECT_EQ(r.dir, s.src.dir);
    EXPECT_EQ(r.provenance, "override:explicit");
  }

  s.selection.checkpoint = test::fresh_dir("explicit-absent") / "nothing";
  const std::string msg = error_of([&] { resolve_checkpoint(s.selection, "cpu", s.lock_dir); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(*s.selection.checkpoint));
  EXPECT_EQ(server.requests(), 0);

  // Checked against the selected manifest: a shard of another checkpoint fails.
  s.selection.checkpoint = test::fresh_dir("explicit-other");
  fs::copy(s.src.dir, *s.selection.checkpoint, fs::copy_options::recursive);
  test::write(*s.selection.checkpoint / "config.json", "{}");
  const std::string other = error_of([&] { resolve_checkpoint(s.selection, "cpu", s.lock_dir); });
  EXPECT_NE(other.find("config.json: size 2 != "), std::string::npos) << other;
}

TEST(Resolve, FailedDownloadLeavesTheCacheEmpty) {
  LoopbackHttp server;
  auto s = setup("faildl", server);
  test::serve(server, s.src);
  const auto& f = s.src.manifest.files[2];
  server.put(test::resolve_path(s.src.manifest, f.path), read_text_file(s.src.dir / f.path),
             test::Fault::corrupt);
  const std::string msg = error_of([&] { resolve_checkpoint(s.selection, "cpu", s.lock_dir); });
  EXPECT_NE(msg.find(f.path), std::string::npos) << msg;
  EXPECT_TRUE(test::entries(s.selection.cache_dir).empty());
}

// Runs once checkpoints/mini.json is shipped: the default is regenerated, not downloaded.
TEST(Resolve, PinnedMiniIsRegeneratedAndLabelledPinned) {
  const auto pinned = pinned_manifest("mini");
  if (!pinned) GTEST_SKIP() << "checkpoints/mini.json is not shipped in this build";
  WeightsSelection s;
  s.cache_dir = test::fresh_dir("mini-cache");
  s.endpoint = "http://127.0.0.1:9";  // never used: nothing is downloaded
  const auto r = resolve_checkpoint(s, "cpu", test::fresh_dir("mini-locks"));
  EXPECT_EQ(r.dir, s.cache_dir / pinned->name);
  EXPECT_EQ(r.provenance, "pinned:" + pinned->repo + "@" + pinned->revision);
}

// The bundled model (docs/decisions.md): found only where $DRAMA_MODELS_DIR says when it is set,
// the default only when found, never produced by materialize_checkpoint, refused by name when
// asked for and absent. (The end-to-end cases: tests/server/test_serve_bundled_default.cpp.)
TEST(Bundled, FoundOnlyWhereTheModelsDirSaysAndTheDefaultOnlyWhenFound) {
  const char* before = std::getenv("DRAMA_MODELS_DIR");
  const std::string saved = before ? before : "";
  const fs::path root = test::fresh_dir("bundled-root");
  setenv("DRAMA_MODELS_DIR", root.c_str(), 1);
  EXPECT_EQ(bundled_model_roots(), std::vector<fs::path>{root});
  EXPECT_FALSE(find_bundled_model(kBundledWeights));
  EXPECT_EQ(default_weights(), "mini");
  WeightsSelection s;
  s.weights = kBundledWeights;
  s.cache_dir = test::fresh_dir("bundled-cache");
  const std::string absent =
      error_of([&] { resolve_checkpoint(s, "cpu", test::fresh_dir("bundled-locks")); });
  EXPECT_NE(absent.find("looked in: " + (root / kBundledWeights).string()), std::string::npos)
      << absent;
  EXPECT_TRUE(fs::is_empty(s.cache_dir));  // nothing downloaded or generated
  fs::create_directory(root / kBundledWeights);
  EXPECT_EQ(find_bundled_model(kBundledWeights), root / kBundledWeights);
  EXPECT_EQ(default_weights(), kBundledWeights);
  const auto pinned = select_manifest(s);
  ASSERT_TRUE(pinned.pinned);
  EXPECT_EQ(checkpoint_source(pinned.manifest, true), CheckpointSource::bundled);
  const std::string refused = error_of([&] {
    materialize_checkpoint(pinned.manifest, CheckpointSource::bundled, s.cache_dir / "x", {});
  });
  EXPECT_NE(refused.find("never downloaded or regenerated"), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(s.cache_dir / "x"));
  // An empty directory is bundled but not the pinned model: refused file by file, untouched.
  const std::string bad =
      error_of([&] { resolve_checkpoint(s, "cpu", test::fresh_dir("bundled-locks2")); });
  EXPECT_NE(bad.find("config.json: missing"), std::string::npos) << bad;
  EXPECT_TRUE(fs::is_empty(root / kBundledWeights));
  if (before)
    setenv("DRAMA_MODELS_DIR", saved.c_str(), 1);
  else
    unsetenv("DRAMA_MODELS_DIR");
}

}  // namespace
}  // namespace drama

// Downloads (spec section 9): into a temporary sibling, verified, renamed into place; every
// failure leaves nothing at the destination and names the file. Served from 127.0.0.1 only.
#include <gtest/gtest.h>

#include "engine/launcher.h"
#include "fetch_fixture.h"
#include "format/random_checkpoint.h"
#include "util/error.h"

namespace drama {
namespace {

using test::Fault;
using test::LoopbackHttp;
namespace fs = std::filesystem;

FetchOptions options_for(const LoopbackHttp& server) {
  FetchOptions o;
  o.endpoint = server.endpoint() + "/";  // a trailing slash is tolerated
  o.progress = false;
  o.connect_timeout_s = 5;
  o.low_speed_time_s = 5;
  return o;
}

TEST(Fetch, CleanDownloadVerifiesAndLeavesOnlyTheDestination) {
  const auto src = test::make_source("clean");
  LoopbackHttp server;
  test::serve(server, src);
  const fs::path parent = test::fresh_dir("clean-dest");
  const fs::path dest = parent / "ckpt";
  materialize_checkpoint(src.manifest, CheckpointSource::download, dest, options_for(server));
  EXPECT_TRUE(verify_directory(dest, src.manifest).ok());
  EXPECT_EQ(test::entries(parent), std::vector<std::string>{"ckpt"});
  EXPECT_EQ(server.requests(), 4);
}

TEST(Fetch, FollowsRedirects) {
  const auto src = test::make_source("redirect");
  LoopbackHttp server;
  test::serve(server, src);
  const auto& f = src.manifest.files[1];
  server.put(test::resolve_path(src.manifest, f.path), read_text_file(src.dir / f.path),
             Fault::redirect);
  const fs::path dest = test::fresh_dir("redirect-dest") / "ckpt";
  materialize_checkpoint(src.manifest, CheckpointSource::download, dest, options_for(server));
  EXPECT_TRUE(verify_directory(dest, src.manifest).ok());
}

// Serves `src` with `fault` on its file `index`; expects a refusal naming that file and
// containing `why`, and nothing at all left in the destination's parent.
void expect_failure(const std::string& name, size_t index, Fault fault, const std::string& why) {
  const auto src = test::make_source(name);
  LoopbackHttp server;
  test::serve(server, src);
  const auto& f = src.manifest.files[index];
  server.put(test::resolve_path(src.manifest, f.path), read_text_file(src.dir / f.path), fault);
  const fs::path parent = test::fresh_dir(name + "-dest");
  try {
    materialize_checkpoint(src.manifest, CheckpointSource::download, parent / "ckpt",
                           options_for(server));
    FAIL() << "download with a fault succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(f.path), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_TRUE(test::entries(parent).empty());
}

TEST(Fetch, CorruptedFileLeavesNothing) {
  expect_failure("corrupt", 1, Fault::corrupt, "sha256 mismatch");
}

TEST(Fetch, DroppedConnectionLeavesNothing) {
  expect_failure("drop", 1, Fault::drop_halfway, "connection dropped after");
}

TEST(Fetch, HttpErrorLeavesNothing) {
  expect_failure("404", 3, Fault::not_found, "HTTP 404");
}

TEST(Fetch, OversizedBodyLeavesNothing) {
  expect_failure("extra", 0, Fault::extra_bytes, "more than the manifest's");
}

TEST(Fetch, ShortBodyLeavesNothing) {
  expect_failure("short", 2, Fault::short_no_length, "(manifest)");
}

TEST(Fetch, UnreachableEndpointLeavesNothing) {
  const auto src = test::make_source("unreachable");
  int port = 0;
  {
    LoopbackHttp server;  // a port that was just free and is closed again
    port = std::stoi(server.endpoint().substr(server.endpoint().rfind(':') + 1));
  }
  FetchOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.progress = false;
  const fs::path parent = test::fresh_dir("unreachable-dest");
  EXPECT_THROW(materialize_checkpoint(src.manifest, CheckpointSource::download, parent / "ckpt", o),
               Error);
  EXPECT_TRUE(test::entries(parent).empty());
}

TEST(Fetch, ExistingDestinationIsNeverReplaced) {
  const auto src = test::make_source("exists");
  LoopbackHttp server;
  test::serve(server, src);
  const fs::path dest = test::fresh_dir("exists-dest") / "ckpt";
  fs::create_directories(dest);  // even an empty directory stays as it is
  const auto before = test::snapshot(dest.parent_path());
  EXPECT_THROW(
      materialize_checkpoint(src.manifest, CheckpointSource::download, dest, options_for(server)),
      Error);
  EXPECT_EQ(test::snapshot(dest.parent_path()), before);
  EXPECT_EQ(server.requests(), 0);
}

TEST(Fetch, EndpointDefaultsFollowTheEnvironment) {
  ::setenv("DRAMA_ENDPOINT", "http://127.0.0.1:9", 1);
  EXPECT_EQ(default_endpoint(), "http://127.0.0.1:9");
  ::unsetenv("DRAMA_ENDPOINT");
  EXPECT_EQ(default_endpoint(), "https://huggingface.co");
  ::setenv("DRAMA_CACHE", "/some/cache", 1);
  EXPECT_EQ(default_cache_dir(), fs::path("/some/cache"));
  ::unsetenv("DRAMA_CACHE");
}

// The "mini" source regenerates locally. The recipe is checked against a manifest computed here
// from the same recipe, so the test runs before checkpoints/mini.json is shipped.
TEST(Fetch, MiniIsRegeneratedVerifiedAndRenamed) {
  const auto text = embedded_json_text("configs/mini.json");
  if (!text) GTEST_SKIP() << "configs/mini.json is not in this build";
  const fs::path ref = test::fresh_dir("mini-ref") / "ckpt";
  RandomCheckpointOptions o;
  o.config = nlohmann::json::parse(*text);
  o.seed = 1;
  o.nvfp4 = true;
  std::printf("mini recipe: configs/mini.json seed %llu nvfp4\n",
              static_cast<unsigned long long>(o.seed));
  write_random_checkpoint(o, ref);
  const auto listed = nlohmann::json::parse(read_text_file(ref / "manifest.json"));
  std::vector<std::string> files;
  for (const auto& f : listed["files"]) files.push_back(f["path"].get<std::string>());
  const Manifest m =
      compute_manifest(ref, files, "mini", "mini", "drama/mini", std::string(40, '0'));
  const fs::path parent = test::fresh_dir("mini-dest");
  materialize_checkpoint(m, CheckpointSource::regenerate_mini, parent / "ckpt", FetchOptions{});
  EXPECT_TRUE(verify_directory(parent / "ckpt", m).ok());
  EXPECT_EQ(test::entries(parent), std::vector<std::string>{"ckpt"});

  // A manifest the recipe does not produce is refused and leaves nothing.
  Manifest wrong = m;
  wrong.files[0].sha256 = std::string(64, '0');
  const fs::path parent2 = test::fresh_dir("mini-wrong");
  EXPECT_THROW(materialize_checkpoint(wrong, CheckpointSource::regenerate_mini, parent2 / "ckpt",
                                      FetchOptions{}),
               Error);
  EXPECT_TRUE(test::entries(parent2).empty());
}

TEST(Fetch, OnlyThePinnedMiniManifestIsRegenerated) {
  Manifest m;
  m.weights = "mini";
  EXPECT_EQ(checkpoint_source(m, true), CheckpointSource::regenerate_mini);
  EXPECT_EQ(checkpoint_source(m, false), CheckpointSource::download);
  m.weights = "nvfp4";
  EXPECT_EQ(checkpoint_source(m, true), CheckpointSource::download);
}

}  // namespace
}  // namespace drama

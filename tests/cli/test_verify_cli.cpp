// `drama verify` and `drama fetch` through the binary (DRAMA_BIN): exit codes, one line per bad
// file, refusals, and the loopback download path.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

#include "engine/fetch_fixture.h"

namespace drama {
namespace {

namespace fs = std::filesystem;
using test::LoopbackHttp;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Result drama(const std::string& args, const std::string& env = "") {
  const char* bin = std::getenv("DRAMA_BIN");
  EXPECT_NE(bin, nullptr) << "DRAMA_BIN is not set";
  Result r;
  FILE* p =
      ::popen((env + " '" + std::string(bin ? bin : "drama") + "' " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quoted(const fs::path& p) {
  return "'" + p.string() + "'";
}

size_t count_lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(VerifyCli, CleanDirectoryExitsZeroQuietly) {
  const auto src = test::make_source("cli-clean");
  const auto m = test::write_manifest(src.manifest, test::fresh_dir("cli-clean-m") / "m.json");
  test::write(src.dir / "manifest.json", "unlisted files are ignored");
  const Result r = drama("verify " + quoted(src.dir) + " --manifest " + quoted(m));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ok: 4 files"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "progress drawn without a terminal";
}

TEST(VerifyCli, OneFlippedByteInAnyFileFailsNamingThatFile) {
  const auto src = test::make_source("cli-flip");
  const auto m = test::write_manifest(src.manifest, test::fresh_dir("cli-flip-m") / "m.json");
  for (const auto& f : src.manifest.files) {
    const std::string original = read_text_file(src.dir / f.path);
    std::string flipped = original;
    flipped[flipped.size() / 3] ^= 0x01;
    test::write(src.dir / f.path, flipped);
    const Result r = drama("verify " + quoted(src.dir) + " --manifest " + quoted(m));
    EXPECT_EQ(r.code, 1) << f.path;
    EXPECT_NE(r.output.find(f.path + ": sha256 mismatch"), std::string::npos) << r.output;
    test::write(src.dir / f.path, original);
  }
}

TEST(VerifyCli, EveryBadFileGetsItsOwnLine) {
  const auto src = test::make_source("cli-many");
  const auto m = test::write_manifest(src.manifest, test::fresh_dir("cli-many-m") / "m.json");
  fs::remove(src.dir / "model-00002-of-00002.safetensors");
  fs::resize_file(src.dir / "codec/model.safetensors", 10);
  const Result r = drama("verify " + quoted(src.dir) + " --manifest " + quoted(m));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("model-00002-of-00002.safetensors: missing\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("codec/model.safetensors: size 10 != 4097 (manifest)\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(count_lines(r.output), 3u) << r.output;  // two files + the summary
}

TEST(VerifyCli, BadManifestAndBadArgumentsAreRefused) {
  const auto src = test::make_source("cli-bad");
  const fs::path m = test::fresh_dir("cli-bad-m") / "m.json";
  auto j = manifest_to_json(src.manifest);
  j["files"][0]["path"] = "../outside";
  test::write(m, j.dump());
  Result r = drama("verify " + quoted(src.dir) + " --manifest " + quoted(m));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("files[0].path '../outside' contains '..'"), std::string::npos)
      << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_EQ(drama("verify " + quoted(src.dir)).code, 2);
}

TEST(FetchCli, WeightsWithoutShippedManifestAreRefused) {
  const Result r = drama("fetch --weights nvfp4 --dir /nonexistent/never");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("no pinned manifest is shipped for weights 'nvfp4'; pass --manifest FILE"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(drama("fetch --weights mini --manifest m.json").code, 2);
}

TEST(FetchCli, DownloadsThenReportsPresentThenRefusesModified) {
  const auto src = test::make_source("cli-fetch");
  const auto m = test::write_manifest(src.manifest, test::fresh_dir("cli-fetch-m") / "m.json");
  LoopbackHttp server;
  test::serve(server, src);
  const fs::path dest = test::fresh_dir("cli-fetch-dest") / "ckpt";
  const std::string args = "fetch --manifest " + quoted(m) + " --dir " + quoted(dest);
  Result r = drama(args + " --endpoint " + server.endpoint());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(override:cli-fetch)"), std::string::npos) << r.output;
  EXPECT_TRUE(verify_directory(dest, src.manifest).ok());

  // Present and intact: nothing downloaded (the endpoint comes from the environment here).
  const int requests = server.requests();
  r = drama(args, "DRAMA_ENDPOINT=" + server.endpoint());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("already present and verified"), std::string::npos) << r.output;
  EXPECT_EQ(server.requests(), requests);

  test::write(dest / "config.json", "{\"model_type\": \"drama9\"}\n");
  const auto before = test::snapshot(dest.parent_path());
  r = drama(args + " --endpoint " + server.endpoint());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("config.json: sha256 mismatch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("left untouched"), std::string::npos) << r.output;
  EXPECT_EQ(test::snapshot(dest.parent_path()), before);
  EXPECT_EQ(server.requests(), requests);
}

TEST(FetchCli, CorruptDownloadLeavesNothingAndSaysWhy) {
  const auto src = test::make_source("cli-corrupt");
  const auto m = test::write_manifest(src.manifest, test::fresh_dir("cli-corrupt-m") / "m.json");
  LoopbackHttp server;
  test::serve(server, src);
  const auto& f = src.manifest.files[1];
  server.put(test::resolve_path(src.manifest, f.path), read_text_file(src.dir / f.path),
             test::Fault::corrupt);
  const fs::path parent = test::fresh_dir("cli-corrupt-dest");
  const Result r = drama("fetch --manifest " + quoted(m) + " --dir " + quoted(parent / "ckpt") +
                         " --endpoint " + server.endpoint());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find(f.path), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sha256 mismatch"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_TRUE(test::entries(parent).empty());
}

}  // namespace
}  // namespace drama

// Manifests (spec section 9): strict parsing, every refusal, verification size-then-hash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "format/manifest.h"
#include "util/error.h"

namespace drama {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const char* base = std::getenv("DRAMA_TEST_TMP");
  fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) /
                 ("manifest-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

nlohmann::json valid_json() {
  return {{"name", "drama-3-test"},
          {"weights", "test"},
          {"repo", "owner/name"},
          {"revision", std::string(40, 'a')},
          {"files",
           {{{"path", "config.json"}, {"size", 3}, {"sha256", std::string(64, 'b')}},
            {{"path", "codec/model.safetensors"}, {"size", 0}, {"sha256", std::string(64, 'C')}}}}};
}

// Expects parse_manifest to refuse `j` with a message containing `needle`.
void expect_refused(const nlohmann::json& j, const std::string& needle) {
  try {
    parse_manifest(j, "m.json");
    FAIL() << "accepted: " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.json"), std::string::npos) << e.what();
  }
}

TEST(Manifest, ParsesValidAndLowercasesHashes) {
  const Manifest m = parse_manifest(valid_json(), "m.json");
  EXPECT_EQ(m.name, "drama-3-test");
  EXPECT_EQ(m.repo, "owner/name");
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files[1].path, "codec/model.safetensors");
  EXPECT_EQ(m.files[1].sha256, std::string(64, 'c'));
  EXPECT_EQ(parse_manifest(manifest_to_json(m), "again").files[0].sha256, m.files[0].sha256);
}

TEST(Manifest, RefusesBadTopLevelFields) {
  auto j = valid_json();
  j.erase("name");
  expect_refused(j, "name");
  j = valid_json();
  j["name"] = "../evil";
  expect_refused(j, "name");
  for (const char* repo : {"noslash", "a/b/c", "/name", "owner/", "ow ner/name"}) {
    j = valid_json();
    j["repo"] = repo;
    expect_refused(j, "repo");
  }
  for (const std::string& rev :
       {std::string(39, 'a'), std::string(41, 'a'), std::string(40, 'g')}) {
    j = valid_json();
    j["revision"] = rev;
    expect_refused(j, "revision");
  }
  j = valid_json();
  j["files"] = nlohmann::json::array();
  expect_refused(j, "files");
  expect_refused(nlohmann::json::array(), "object");
}

TEST(Manifest, RefusesUnsafePaths) {
  for (const char* path :
       {"/etc/passwd", "../x", "a/../b", "a/..", "a\\b", "", "a//b", "./a", "a/"}) {
    auto j = valid_json();
    j["files"][0]["path"] = path;
    expect_refused(j, "path");
  }
}

TEST(Manifest, RefusesBadSizesHashesAndDuplicates) {
  for (const nlohmann::json& size :
       {nlohmann::json(-1), nlohmann::json(1.5), nlohmann::json("3")}) {
    auto j = valid_json();
    j["files"][0]["size"] = size;
    expect_refused(j, "size");
  }
  for (const std::string& sha : {std::string(63, 'a'), std::string(64, 'z'), std::string()}) {
    auto j = valid_json();
    j["files"][0]["sha256"] = sha;
    expect_refused(j, "sha256");
  }
  auto j = valid_json();
  j["files"][1]["path"] = "config.json";
  expect_refused(j, "listed twice");
}

TEST(Manifest, LoadRefusesInvalidJson) {
  const fs::path dir = fresh_dir("json");
  write(dir / "m.json", "{not json");
  EXPECT_THROW(load_manifest(dir / "m.json"), Error);
  EXPECT_THROW(load_manifest(dir / "absent.json"), Error);
}

struct Checkpoint {
  fs::path dir;
  Manifest manifest;
};

Checkpoint small_checkpoint(const std::string& name) {
  const fs::path dir = fresh_dir(name);
  write(dir / "config.json", "{\"model_type\": \"drama3\"}");
  write(dir / "model-00001-of-00002.safetensors", std::string(1000, 'x'));
  write(dir / "model-00002-of-00002.safetensors", std::string(777, 'y'));
  write(dir / "codec/model.safetensors", std::string(123, 'z'));
  const std::vector<std::string> files = {"config.json", "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors",
                                          "codec/model.safetensors"};
  return {dir, compute_manifest(dir, files, "t", "test", "owner/name", std::string(40, '0'))};
}

TEST(Verify, CleanDirectoryPassesAndUnlistedFilesAreIgnored) {
  const auto c = small_checkpoint("clean");
  write(c.dir / "manifest.json", "written by make-checkpoint, not listed");
  uint64_t reported = 0;
  const auto r = verify_directory(c.dir, c.manifest, [&](uint64_t n) { reported += n; });
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.bytes_hashed, 24u + 1000 + 777 + 123);
  EXPECT_EQ(reported, r.bytes_hashed);
}

TEST(Verify, OneFlippedByteInAnyFileNamesThatFile) {
  const auto c = small_checkpoint("flip");
  for (const auto& f : c.manifest.files) {
    const fs::path p = c.dir / f.path;
    std::fstream io(p, std::ios::binary | std::ios::in | std::ios::out);
    io.seekg(static_cast<std::streamoff>(f.size / 2));
    const char b = static_cast<char>(io.get());
    io.seekp(static_cast<std::streamoff>(f.size / 2));
    io.put(static_cast<char>(b ^ 1));
    io.close();
    const auto r = verify_directory(c.dir, c.manifest);
    ASSERT_EQ(r.problems.size(), 1u) << f.path;
    EXPECT_EQ(r.problems[0].path, f.path);
    EXPECT_EQ(r.problems[0].reason, "sha256 mismatch");
    io.open(p, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(f.size / 2));
    io.put(b);
  }
  EXPECT_TRUE(verify_directory(c.dir, c.manifest).ok());
}

TEST(Verify, ListsEveryMissingTruncatedAndModifiedFile) {
  const auto c = small_checkpoint("many");
  fs::remove(c.dir / "model-00002-of-00002.safetensors");
  fs::resize_file(c.dir / "model-00001-of-00002.safetensors", 999);
  write(c.dir / "config.json", "{\"model_type\": \"drama4\"}");
  fs::remove(c.dir / "codec/model.safetensors");
  fs::create_directory(c.dir / "codec/model.safetensors");
  const auto r = verify_directory(c.dir, c.manifest);
  ASSERT_EQ(r.problems.size(), 4u);
  EXPECT_EQ(r.problems[0].path, "config.json");
  EXPECT_EQ(r.problems[0].reason, "sha256 mismatch");
  EXPECT_EQ(r.problems[1].path, "model-00001-of-00002.safetensors");
  EXPECT_EQ(r.problems[1].reason, "size 999 != 1000 (manifest)");
  EXPECT_EQ(r.problems[2].path, "model-00002-of-00002.safetensors");
  EXPECT_EQ(r.problems[2].reason, "missing");
  EXPECT_EQ(r.problems[3].path, "codec/model.safetensors");
  EXPECT_EQ(r.problems[3].reason, "not a regular file");
  // Only the file of the right size was hashed.
  EXPECT_EQ(r.bytes_hashed, 24u);
}

TEST(Pinned, UnknownWeightsHaveNoManifestAndShippedOnesParse) {
  EXPECT_FALSE(pinned_manifest("nvfp4-never-shipped").has_value());
  EXPECT_FALSE(pinned_manifest("../configs/mini").has_value());
  for (const auto& w : pinned_weights()) {
    const auto m = pinned_manifest(w);
    ASSERT_TRUE(m.has_value()) << w;
    EXPECT_EQ(m->weights, w);
  }
}

}  // namespace
}  // namespace drama

// Shared helpers of the fetch and launcher tests: small checkpoints written by hand (hashed with
// compute_manifest), served from the loopback server, and byte + mtime snapshots of directories.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "format/manifest.h"
#include "loopback_http.h"
#include "util/fs.h"

namespace drama::test {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  const char* base = std::getenv("DRAMA_TEST_TMP");
  fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) /
                 ("engine-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

struct SourceCheckpoint {
  fs::path dir;
  Manifest manifest;
};

// A checkpoint-shaped directory of small files; the seed is fixed so failures reproduce.
inline SourceCheckpoint make_source(const std::string& name) {
  const fs::path dir = fresh_dir(name + "-source");
  write(dir / "config.json", "{\"model_type\": \"drama3\"}\n");
  write(dir / "model-00001-of-00002.safetensors", random_bytes(300000, 1));
  write(dir / "model-00002-of-00002.safetensors", random_bytes(70001, 2));
  write(dir / "codec/model.safetensors", random_bytes(4097, 3));
  const std::vector<std::string> files = {"config.json", "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors",
                                          "codec/model.safetensors"};
  return {dir, compute_manifest(dir, files, name, "test", "owner/name",
                                "0123456789abcdef0123456789abcdef01234567")};
}

inline std::string resolve_path(const Manifest& m, const std::string& file) {
  return "/" + m.repo + "/resolve/" + m.revision + "/" + file;
}

inline void serve(LoopbackHttp& server, const SourceCheckpoint& c) {
  for (const auto& f : c.manifest.files)
    server.put(resolve_path(c.manifest, f.path), read_text_file(c.dir / f.path));
}

inline fs::path write_manifest(const Manifest& m, const fs::path& where) {
  write(where, manifest_to_json(m).dump(2));
  return where;
}

// Every entry under `dir` with its bytes (files) and modification time in nanoseconds.
inline std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    const std::string mtime =
        std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    const std::string rel = fs::relative(e.path(), dir).string();
    out[rel] = mtime + ":" + (e.is_regular_file() ? read_text_file(e.path()) : std::string("d"));
  }
  return out;
}

// Names in `dir` (to prove no temporary directory was left behind).
inline std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace drama::test

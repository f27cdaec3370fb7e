// Pinned manifests and provenance (spec section 9).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drama {

struct ManifestFile {
  std::string path;  // relative, '/'-separated, no '..', no absolute paths
  uint64_t size = 0;
  std::string sha256;  // 64 lower-case hex
};

struct Manifest {
  std::string name;      // "drama-3-nvfp4-pruned"
  std::string weights;   // "mini" | "nvfp4" | "bf16" | free text for user manifests
  std::string repo;      // "owner/name"
  std::string revision;  // 40 hex
  std::vector<ManifestFile> files;
};

Manifest parse_manifest(const nlohmann::json& j, const std::string& label);
Manifest load_manifest(const std::filesystem::path& path);
nlohmann::json manifest_to_json(const Manifest& m);

// Hashes the listed files of `dir` (relative paths) into a manifest.
Manifest compute_manifest(const std::filesystem::path& dir, const std::vector<std::string>& files,
                          const std::string& name, const std::string& weights,
                          const std::string& repo, const std::string& revision);

// The content-derived revision of the checkpoints drama writes (make-checkpoint, quantize,
// voice write --into): the first 40 hex digits of SHA-256 over one "path sha256\n" line per file,
// in the manifest's order. Same bytes, same revision; it never names a real commit.
std::string content_revision(const std::vector<ManifestFile>& files);

// compute_manifest over `files` sorted by path, with the content-derived revision.
Manifest pin_local_checkpoint(const std::filesystem::path& dir, std::vector<std::string> files,
                              const std::string& name, const std::string& weights,
                              const std::string& repo);

// manifest.json as drama writes it (two-space indent, trailing newline), atomically.
void write_manifest(const std::filesystem::path& path, const Manifest& manifest);

struct VerifyProblem {
  std::string path;
  std::string reason;  // "missing", "size 123 != 456", "sha256 mismatch"
};

struct VerifyReport {
  std::vector<VerifyProblem> problems;  // every bad or missing file
  uint64_t bytes_hashed = 0;
  double seconds = 0;
  bool ok() const { return problems.empty(); }
};

// Size first, then SHA-256 of every listed file. `on_bytes` reports hashing progress.
VerifyReport verify_directory(const std::filesystem::path& dir, const Manifest& manifest,
                              const std::function<void(uint64_t)>& on_bytes = {});

// Manifests the project ships (checkpoints/*.json, embedded in the binary at build time).
std::optional<Manifest> pinned_manifest(const std::string& weights);
std::vector<std::string> pinned_weights();  // names that have a shipped manifest

// Text of a JSON file embedded at build time, by its path in the source tree
// ("checkpoints/mini.json", "configs/mini.json"); nullopt when none was embedded.
std::optional<std::string> embedded_json_text(const std::string& path);

}  // namespace drama

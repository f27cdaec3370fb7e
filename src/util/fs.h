// File helpers: whole-file reads, atomic writes (temporary file in the same directory, fsync,
// rename, fsync of the directory), and SHA-256 through OpenSSL.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace drama {

std::vector<uint8_t> read_file(const std::filesystem::path& path);
std::string read_text_file(const std::filesystem::path& path);

// Writes `bytes` to `path` atomically: readers see the old file or the whole new one, never a
// part; on failure nothing is left behind.
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);
void write_text_file_atomic(const std::filesystem::path& path, const std::string& text);

// fsync a directory so a rename inside it is durable.
void fsync_directory(const std::filesystem::path& dir);

// Creates the directory `dir` atomically: `fill` writes into a new temporary sibling, which is
// fsynced and renamed to `dir` without replacing anything that appeared there meanwhile; on any
// failure the temporary directory is removed and the exception goes on. The caller checks
// beforehand that `dir` is absent and its parent exists (its messages name its option).
void write_directory_atomic(const std::filesystem::path& dir,
                            const std::function<void(const std::filesystem::path& tmp)>& fill);

// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t bytes);
  std::string hex();  // finishes; lower-case 64 hex digits

 private:
  void* ctx_;
};

std::string sha256_hex(std::span<const uint8_t> bytes);
// Hashes a file by streaming reads; `on_bytes` (optional) is called with each chunk's size.
std::string sha256_file(const std::filesystem::path& path,
                        const std::function<void(uint64_t)>& on_bytes = {});

}  // namespace drama

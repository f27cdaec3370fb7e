// Safetensors: memory-mapped, zero-copy reading with strict validation, sharded checkpoints through
// model.safetensors.index.json, and an atomic writer for tools and tests.
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data (offsets relative to it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/dtype.h"
#include "util/error.h"

namespace drama {

inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;  // 100 MiB

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;          // 8 + header length
  std::vector<TensorInfo> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

// Parses and validates a header. `bytes` holds at least the first min(file_size, 8 + N) bytes of
// the file; `file_size` is the whole file's size; `label` names the file in errors. Throws
// drama::Error naming the file (and tensor) for: header length beyond the file or over 100 MiB,
// invalid JSON, unknown dtype, bad shape, shape x dtype size != byte range, ranges out of bounds,
// overlapping or unordered ranges, duplicate names, overflow in shape products.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                           std::string_view label);

// Where a file's bytes live while it is open. Mapped: a read-only mapping of the file (pages come
// in on first touch and are shared with the page cache; opening copies nothing). InMemory: the
// whole file is read into anonymous process memory (transparent huge pages where the kernel
// allows), then made read-only: costs the file's size in RAM at open, and on some VMs reads
// 1.4-1.9x as fast as the page cache (docs/model.md, "Decode figures"). The engine's default;
// `--mmap` maps.
enum class Residency { Mapped, InMemory };

// A read-only view of a whole file: a memory mapping, or a read-only in-memory copy.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path, Residency residency = Residency::Mapped);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// A view of one tensor's bytes inside a mapping (no copy).
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  std::string_view file;  // the file it lives in, for errors
  size_t bytes() const { return info->end - info->begin; }
  // Typed access; throws when the bytes do not hold whole, aligned elements of T (safetensors
  // packs tensors back to back, so a tensor after an odd-sized one can be misaligned).
  template <typename T>
  std::span<const T> as() const {
    if (bytes() % sizeof(T) != 0 || reinterpret_cast<uintptr_t>(data) % alignof(T) != 0)
      throw Error(std::string(file) + ": tensor '" + info->name + "' is not an aligned array of " +
                  std::to_string(sizeof(T)) + "-byte elements");
    return {reinterpret_cast<const T*>(data), bytes() / sizeof(T)};
  }
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path,
                           Residency residency = Residency::Mapped);
  const std::filesystem::path& path() const { return map_->path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorInfo* find(std::string_view name) const;
  TensorView view(std::string_view name) const;  // throws naming file and tensor if absent

 private:
  std::shared_ptr<MappedFile> map_;
  SafetensorsHeader header_;
  std::string label_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Reading `need` bytes of files into memory (Residency::InMemory) when the system reports less
// memory available (MemAvailable, which counts reclaimable page cache) would end in the process
// being killed part way through the read: returns the refusal's text naming `what`, or nothing
// when it fits or the available memory is unknown.
std::optional<std::string> in_memory_refusal(uint64_t need, std::optional<uint64_t> available,
                                             const std::string& what);
// MemAvailable from /proc/meminfo in bytes; nothing where it cannot be read.
std::optional<uint64_t> available_memory_bytes();

// All tensors of a checkpoint directory: model.safetensors.index.json (weight_map tensor -> shard)
// or a single model.safetensors. Throws naming the index, shard and tensor when the index points
// at a missing shard or a tensor its shard lacks, or a tensor is in a shard the index does not map
// it to. With Residency::InMemory, shards that together exceed the available memory are refused
// before any is read (in_memory_refusal).
class TensorSet {
 public:
  explicit TensorSet(const std::filesystem::path& dir, Residency residency = Residency::Mapped);
  // Opens one file as a set (codec/model.safetensors, voice files).
  static TensorSet single(const std::filesystem::path& file);
  const TensorInfo* find(std::string_view name) const;
  TensorView view(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  uint64_t total_bytes() const;            // sum of tensor byte ranges
  const std::filesystem::path& root() const { return root_; }

 private:
  TensorSet() = default;
  std::filesystem::path root_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> where_;  // name -> (file, tensor)
};

// One tensor of a checkpoint to write: its header fields; its bytes are asked for when written.
struct ShardTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes() const;
};

// Writes `tensors` in order into the checkpoint's model.safetensors, or into shards
// model-0000i-of-0000n.safetensors of about 1 GiB by running byte count (two shards for
// checkpoints of 8 MiB or less, so small test checkpoints exercise the sharded path) plus
// model.safetensors.index.json; `take(i)` returns tensor i's bytes when its shard is written, so
// at most one shard is in memory. Every file is written atomically. Returns the files written,
// relative to `dir`. `label` names the progress bar.
std::vector<std::string> write_checkpoint_shards(
    const std::filesystem::path& dir, const std::vector<ShardTensor>& tensors,
    const std::function<std::vector<uint8_t>(size_t)>& take, const std::string& label);

// Builds a safetensors file in memory order of add() calls and writes it atomically
// (temporary file in the same directory, fsync, rename). Tensors are written in the order added;
// the header is padded with spaces so the data section starts at a multiple of 8 bytes, and
// __metadata__ is written only when set. add() throws for an empty, reserved or repeated name, a
// negative dimension, or bytes that do not match shape x dtype size.
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::span<const uint8_t> bytes);
  // Like add() without copying: `bytes` must stay alive and unchanged until write()/serialize()
  // (for multi-GB checkpoints whose tensors already sit in the caller's buffers).
  void add_borrowed(const std::string& name, DType dtype, std::vector<int64_t> shape,
                    std::span<const uint8_t> bytes);
  template <typename T>
  void add_typed(const std::string& name, DType dtype, std::vector<int64_t> shape,
                 std::span<const T> values) {
    add(name, dtype, std::move(shape),
        {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()});
  }
  void set_metadata(const std::string& key, const std::string& value);
  uint64_t data_bytes() const { return data_bytes_; }
  // Streams the header and then each tensor to the temporary file: no second copy in memory.
  void write(const std::filesystem::path& path) const;
  std::vector<uint8_t> serialize() const;  // the whole file's bytes
  std::string header_json() const;         // the padded JSON header (without the length prefix)

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
    const uint8_t* borrowed = nullptr;  // null: bytes live in data_ at [owned_at, +end-begin)
    uint64_t owned_at = 0;
  };
  Entry& check_and_append(const std::string& name, DType dtype, std::vector<int64_t> shape,
                          uint64_t nbytes);
  std::span<const uint8_t> bytes_of(const Entry& e) const;
  std::vector<Entry> entries_;
  std::set<std::string, std::less<>> names_;
  std::vector<uint8_t> data_;  // copies made by add()
  uint64_t data_bytes_ = 0;    // the data section's size, owned and borrowed
  std::map<std::string, std::string> metadata_;
};

}  // namespace drama

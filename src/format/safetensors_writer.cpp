// Safetensors writing: header JSON padded to 8 bytes, tensors in add() order, atomic streaming
// write (temporary file in the target directory, fsync, rename, fsync of the directory).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "format/safetensors.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace fs = std::filesystem;

SafetensorsWriter::Entry& SafetensorsWriter::check_and_append(const std::string& name, DType dtype,
                                                              std::vector<int64_t> shape,
                                                              uint64_t nbytes) {
  if (name.empty() || name == "__metadata__")
    throw Error("safetensors writer: tensor name '" + name + "' is empty or reserved");
  if (names_.count(name)) throw Error("safetensors writer: tensor '" + name + "' added twice");
  uint64_t expected = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) throw Error("safetensors writer: tensor '" + name + "' has a negative dimension");
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected))
      throw Error("safetensors writer: tensor '" + name + "' has a shape that overflows 64 bits");
  }
  if (expected != nbytes)
    throw Error("safetensors writer: tensor '" + name + "' has " + std::to_string(nbytes) +
                " bytes but its shape and dtype need " + std::to_string(expected));
  names_.insert(name);
  entries_.push_back({name, dtype, std::move(shape), data_bytes_, data_bytes_ + nbytes});
  data_bytes_ += nbytes;
  return entries_.back();
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::span<const uint8_t> bytes) {
  Entry& e = check_and_append(name, dtype, std::move(shape), bytes.size());
  e.owned_at = data_.size();
  data_.insert(data_.end(), bytes.begin(), bytes.end());
}

void SafetensorsWriter::add_borrowed(const std::string& name, DType dtype,
                                     std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  Entry& e = check_and_append(name, dtype, std::move(shape), bytes.size());
  e.borrowed = bytes.data();
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::span<const uint8_t> SafetensorsWriter::bytes_of(const Entry& e) const {
  const size_t n = e.end - e.begin;
  if (e.borrowed) return {e.borrowed, n};
  return {data_.data() + e.owned_at, n};
}

std::string SafetensorsWriter::header_json() const {
  // ordered_json keeps __metadata__ first and tensors in data order, which makes headers readable.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata_.empty()) j["__metadata__"] = metadata_;
  for (const auto& e : entries_)
    j[e.name] = {
        {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("safetensors writer: a tensor name or metadata string is not UTF-8 (") +
                e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  const std::string header = header_json();
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data_bytes_);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const auto& e : entries_) {
    auto b = bytes_of(e);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

namespace {

// A temporary file that is removed unless committed by rename.
class AtomicOutput {
 public:
  explicit AtomicOutput(const fs::path& path) : path_(path) {
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    std::random_device rd;
    tmp_ = dir / ("." + path.filename().string() + ".tmp-" + std::to_string(rd()));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create " + tmp_.string() + ": " + std::strerror(errno));
  }
  ~AtomicOutput() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void write(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, 1u << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error("cannot write " + path_.string() + ": " + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      throw Error("cannot write " + path_.string() + ": " + std::strerror(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      throw Error("cannot write " + path_.string() + ": " + std::strerror(errno));
    committed_ = true;
    fsync_directory(path_.has_parent_path() ? path_.parent_path() : fs::path("."));
  }

 private:
  fs::path path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void SafetensorsWriter::write(const fs::path& path) const {
  const std::string header = header_json();
  uint8_t prefix[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(n >> (8 * i));
  AtomicOutput out(path);
  out.write(prefix, 8);
  out.write(reinterpret_cast<const uint8_t*>(header.data()), header.size());
  for (const auto& e : entries_) {
    auto b = bytes_of(e);
    out.write(b.data(), b.size());
  }
  out.commit();
}

}  // namespace drama

// Safetensors reading: strict header validation, read-only memory mappings, zero-copy views, and
// sharded checkpoint directories (docs/safetensors.md lists every refusal).
#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "util/error.h"
#include "util/fs.h"
#include "util/memory.h"
#include "util/progress.h"

namespace drama {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Headers nest at most three deep ({name: {shape: [..]}}); anything far deeper is hostile.
constexpr size_t kMaxJsonDepth = 16;

std::string in_quotes(std::string_view s) {
  return "'" + std::string(s) + "'";
}

// Checks a JSON text before it is parsed into a value: refuses duplicate keys in any object
// (nlohmann would silently keep one of them, and which tensor a reader sees must not depend on the
// parser) and nesting deeper than kMaxJsonDepth. A SAX pass, linear in the text: nlohmann's
// callback parser rescans the enclosing object at every object's end, which made a header of
// 60000 tensors take 31 s to parse.
class UniqueKeyChecker : public nlohmann::json_sax<json> {
 public:
  explicit UniqueKeyChecker(const std::string& label) : label_(label) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back(std::in_place);
    return enter();
  }
  bool key(string_t& k) override {
    if (!open_.back().has_value()) return true;
    if (!open_.back()->insert(k).second) {
      error_ = label_ + ": duplicate key " + in_quotes(k);
      return false;
    }
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    open_.emplace_back(std::nullopt);  // arrays have no keys
    return enter();
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = label_ + ": invalid JSON (" + e.what() + ")";
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  bool enter() {
    if (open_.size() <= kMaxJsonDepth) return true;
    error_ = label_ + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }
  const std::string& label_;
  std::vector<std::optional<std::set<std::string>>> open_;  // keys seen per enclosing object
  std::string error_;
};

json parse_json_unique_keys(std::string_view text, const std::string& label) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore whatever follows it;
  // JSON never contains a raw NUL, so refuse it instead of parsing a prefix.
  if (text.find('\0') != std::string_view::npos)
    throw Error(label + ": invalid JSON (it contains a NUL byte)");
  UniqueKeyChecker checker(label);
  if (!json::sax_parse(text.begin(), text.end(), &checker)) throw Error(checker.error());
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(label + ": invalid JSON (" + e.what() + ")");
  }
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                       const std::string& label) {
  const std::string where = label + ": tensor " + in_quotes(name);
  if (name.empty()) throw Error(label + ": a tensor has an empty name");
  if (!entry.is_object()) throw Error(where + " is not a JSON object");
  for (const auto& [key, value] : entry.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      throw Error(where + " has unknown field " + in_quotes(key));
  }
  TensorInfo t;
  t.name = name;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string())
    throw Error(where + " lacks a string field 'dtype'");
  auto dt = dtype_from_name(dtype->get<std::string>());
  if (!dt) throw Error(where + " has unknown dtype " + in_quotes(dtype->get<std::string>()));
  t.dtype = *dt;

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array())
    throw Error(where + " lacks an array field 'shape'");
  uint64_t numel = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_integer()) throw Error(where + " has a non-integer dimension in 'shape'");
    if (d.is_number_unsigned() ? d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                               : d.get<int64_t>() < 0)
      throw Error(where + " has a negative or oversized dimension " + d.dump() + " in 'shape'");
    const int64_t dim = d.get<int64_t>();
    t.shape.push_back(dim);
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel))
      throw Error(where + " has a shape whose element count overflows 64 bits");
  }
  uint64_t nbytes = 0;
  if (numel > uint64_t(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes))
    throw Error(where + " has a shape whose byte size overflows 64 bits");

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_integer() || !(*offsets)[1].is_number_integer())
    throw Error(where + " lacks a field 'data_offsets' of two integers");
  if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    throw Error(where + " has a negative value in 'data_offsets'");
  t.begin = (*offsets)[0].get<uint64_t>();
  t.end = (*offsets)[1].get<uint64_t>();
  if (t.begin > t.end)
    throw Error(where + " has data_offsets [" + std::to_string(t.begin) + ", " +
                std::to_string(t.end) + "] that end before they begin");
  if (t.end > data_size)
    throw Error(where + " has data_offsets ending at " + std::to_string(t.end) +
                ", beyond the data section of " + std::to_string(data_size) + " bytes");
  if (t.end - t.begin != nbytes)
    throw Error(where + " has shape " + shape_string(t.shape) + " of " +
                std::string(dtype_name(t.dtype)) + " (" + std::to_string(nbytes) +
                " bytes) but data_offsets cover " + std::to_string(t.end - t.begin) + " bytes");
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated against overflow when parsed
  return n;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                           std::string_view label_view) {
  const std::string label(label_view);
  if (file_size < 8 || bytes.size() < 8)
    throw Error(label + " is not a safetensors file: it is shorter than the 8-byte header length");
  const uint64_t n = read_le64(bytes.data());
  if (n > kMaxSafetensorsHeader)
    throw Error(label + ": header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n > file_size - 8)
    throw Error(label + ": header length " + std::to_string(n) + " runs beyond the end of the " +
                std::to_string(file_size) + "-byte file");
  if (bytes.size() - 8 < n)
    throw Error(label + ": only " + std::to_string(bytes.size()) + " bytes given for a " +
                std::to_string(8 + n) + "-byte header");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;

  const json j = parse_json_unique_keys(
      {reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<size_t>(n)}, label);
  if (!j.is_object()) throw Error(label + ": header is not a JSON object");
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw Error(label + ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          throw Error(label + ": __metadata__ value of " + in_quotes(key) + " is not a string");
        h.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(name, entry, data_size, label));
  }

  // The data section must be exactly covered: tensors back to back in offset order, no overlap,
  // no gap, no trailing bytes (as the format's reference implementation requires).
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin < expected)
      throw Error(label + ": tensor " + in_quotes(t.name) + " overlaps tensor " +
                  in_quotes(previous->name) + " in the data section");
    if (t.begin > expected)
      throw Error(label + ": the data section has a gap of " + std::to_string(t.begin - expected) +
                  " bytes before tensor " + in_quotes(t.name));
    expected = t.end;
    previous = &t;
  }
  if (expected != data_size)
    throw Error(label + ": the data section has " + std::to_string(data_size - expected) +
                " trailing bytes not covered by any tensor");
  return h;
}

MappedFile::MappedFile(const fs::path& path, Residency residency) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot map " + path.string() + ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0 && residency == Residency::Mapped) {
    // MAP_PRIVATE + PROT_READ: pages come in on first touch and are shared with the page cache, so
    // opening a multi-GB checkpoint costs no resident memory until tensors are read.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error("cannot map " + path.string() + ": " + why);
    }
    data_ = static_cast<const uint8_t*>(p);
  } else if (size_ > 0) {
    void* p = map_huge_anonymous(size_);
    if (!p) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error("cannot allocate " + std::to_string(size_) + " bytes for " + path.string() +
                  ": " + why);
    }
    auto* bytes = static_cast<uint8_t*>(p);
    uint64_t done = 0;
    std::string why;
    while (done < size_) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(size_ - done, uint64_t{1} << 30));
      const ssize_t got = ::pread(fd, bytes + done, want, static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        why = got < 0 ? std::strerror(errno) : "the file is shorter than it was at open";
        break;
      }
      done += static_cast<uint64_t>(got);
    }
    if (why.empty() && ::mprotect(p, size_, PROT_READ) != 0) why = std::strerror(errno);
    if (!why.empty()) {
      ::munmap(p, size_);
      ::close(fd);
      throw Error("cannot read " + path.string() + ": " + why);
    }
    data_ = bytes;
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

SafetensorsFile::SafetensorsFile(const fs::path& path, Residency residency)
    : map_(std::make_shared<MappedFile>(path, residency)), label_(path.string()) {
  header_ = parse_safetensors_header({map_->data(), map_->size()}, map_->size(), label_);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(label_ + " has no tensor " + in_quotes(name));
  // The view names the file through the mapping's path, which outlives moves of this object.
  return {t, map_->data() + header_.data_start + t->begin, map_->path().native()};
}

namespace {

// Shard names come from the index file and must stay inside the checkpoint directory.
void check_shard_name(const std::string& shard, const std::string& tensor,
                      const std::string& index_label) {
  if (shard.empty() || shard.find('/') != std::string::npos ||
      shard.find('\\') != std::string::npos || shard.find("..") != std::string::npos ||
      shard.find('\0') != std::string::npos)
    throw Error(index_label + ": tensor " + in_quotes(tensor) + " maps to shard " +
                in_quotes(shard) +
                ", which is not a plain file name inside the checkpoint directory");
}

}  // namespace

std::optional<std::string> in_memory_refusal(uint64_t need, std::optional<uint64_t> available,
                                             const std::string& what) {
  if (!available || need <= *available) return std::nullopt;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return "reading " + what + " into memory needs " + std::to_string((need + kMiB - 1) / kMiB) +
         " MiB but the system has " + std::to_string(*available / kMiB) +
         " MiB available; map it instead (--mmap)";
}

std::optional<uint64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    unsigned long long kib = 0;  // "MemAvailable:   123456 kB"
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return kib * 1024;
  }
  return std::nullopt;
}

namespace {
void refuse_unless_fits(const std::vector<fs::path>& files, Residency residency,
                        const fs::path& what) {
  if (residency != Residency::InMemory) return;
  uint64_t need = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (!ec) need += size;
  }
  if (auto why = in_memory_refusal(need, available_memory_bytes(), what.string()))
    throw Error(*why);
}
}  // namespace

TensorSet::TensorSet(const fs::path& dir, Residency residency) : root_(dir) {
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("checkpoint directory " + dir.string() + " does not exist or is not a directory");
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec))
      throw Error("checkpoint directory " + dir.string() +
                  " has neither model.safetensors.index.json nor model.safetensors");
    refuse_unless_fits({single_path}, residency, dir);
    files_.push_back(std::make_unique<SafetensorsFile>(single_path, residency));
    for (size_t i = 0; i < files_[0]->tensors().size(); ++i)
      where_.emplace(files_[0]->tensors()[i].name, std::make_pair(size_t{0}, i));
    return;
  }

  const std::string label = index_path.string();
  const json index = parse_json_unique_keys(read_text_file(index_path), label);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(label + " lacks a 'weight_map' object");
  if (index["weight_map"].empty()) throw Error(label + ": 'weight_map' lists no tensors");
  std::map<std::string, size_t> shard_ids;  // shard file name -> index in files_
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw Error(label + ": weight_map entry " + in_quotes(tensor) + " is not a string");
    const std::string name = shard.get<std::string>();
    check_shard_name(name, tensor, label);
    shard_ids.emplace(name, 0);
  }
  std::vector<fs::path> shard_paths;
  for (const auto& [name, id] : shard_ids) {
    const fs::path p = dir / name;
    if (!fs::exists(p, ec))
      throw Error(label + " names shard " + in_quotes(name) + ", which does not exist in " +
                  dir.string());
    shard_paths.push_back(p);
  }
  refuse_unless_fits(shard_paths, residency, dir);
  for (auto& [name, id] : shard_ids) {
    id = files_.size();
    files_.push_back(std::make_unique<SafetensorsFile>(dir / name, residency));
  }
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    const size_t id = shard_ids.at(shard.get<std::string>());
    const TensorInfo* t = files_[id]->find(tensor);
    if (!t)
      throw Error(label + " maps tensor " + in_quotes(tensor) + " to shard " +
                  in_quotes(shard.get<std::string>()) + ", which does not contain it");
    where_.emplace(tensor,
                   std::make_pair(id, static_cast<size_t>(t - files_[id]->tensors().data())));
  }
  // Every tensor a shard holds must be the one the index points at: a stray copy would make the
  // checkpoint's content depend on which file a reader opens.
  for (const auto& [name, id] : shard_ids) {
    for (const auto& t : files_[id]->tensors()) {
      auto it = where_.find(t.name);
      if (it == where_.end())
        throw Error(files_[id]->path().string() + " holds tensor " + in_quotes(t.name) +
                    ", which " + label + " does not list");
      if (it->second.first != id)
        throw Error(files_[id]->path().string() + " holds tensor " + in_quotes(t.name) +
                    ", which " + label + " maps to shard " +
                    in_quotes(files_[it->second.first]->path().filename().string()));
    }
  }
}

TensorSet TensorSet::single(const fs::path& file) {
  TensorSet set;
  set.root_ = file;
  set.files_.push_back(std::make_unique<SafetensorsFile>(file));
  for (size_t i = 0; i < set.files_[0]->tensors().size(); ++i)
    set.where_.emplace(set.files_[0]->tensors()[i].name, std::make_pair(size_t{0}, i));
  return set;
}

const TensorInfo* TensorSet::find(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  return &files_[it->second.first]->tensors()[it->second.second];
}

TensorView TensorSet::view(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(root_.string() + " has no tensor " + in_quotes(name));
  return files_[it->second.first]->view(name);
}

std::vector<std::string> TensorSet::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, loc] : where_) out.push_back(name);
  return out;
}

uint64_t TensorSet::total_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files_)
    for (const auto& t : f->tensors()) total += t.end - t.begin;
  return total;
}

uint64_t ShardTensor::bytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::vector<std::string> write_checkpoint_shards(
    const fs::path& dir, const std::vector<ShardTensor>& tensors,
    const std::function<std::vector<uint8_t>(size_t)>& take, const std::string& label) {
  constexpr uint64_t kShardBytes = 1ull << 30;  // split above ~1 GiB, as Hugging Face tools do
  constexpr uint64_t kSmallBytes = 8ull << 20;  // smaller checkpoints always use two shards
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes();
  size_t n =
      total <= kSmallBytes ? 2 : static_cast<size_t>((total + kShardBytes - 1) / kShardBytes);
  // Assign by the running byte count, then drop any empty shard.
  std::vector<std::vector<size_t>> shards(n);
  uint64_t before = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    shards[std::min<size_t>(n - 1,
                            static_cast<size_t>((before * n) / std::max<uint64_t>(total, 1)))]
        .push_back(i);
    before += tensors[i].bytes();
  }
  std::erase_if(shards, [](const auto& s) { return s.empty(); });
  n = shards.size();
  Progress progress(label, total);
  std::vector<std::string> files;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < n; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, n);
    const std::string file = n == 1 ? "model.safetensors" : name;
    SafetensorsWriter writer;
    writer.set_metadata("format", "pt");
    for (size_t i : shards[s]) {
      const ShardTensor& t = tensors[i];
      const std::vector<uint8_t> bytes = take(i);
      writer.add(t.name, t.dtype, t.shape, bytes);
      weight_map[t.name] = file;
      progress.add(bytes.size());
    }
    writer.write(dir / file);
    files.push_back(file);
  }
  progress.finish();
  if (n > 1) {
    write_text_file_atomic(
        dir / "model.safetensors.index.json",
        nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) +
            "\n");
    files.push_back("model.safetensors.index.json");
  }
  return files;
}

}  // namespace drama

// Pinned manifests and provenance (spec section 9): parsing with strict validation, hashing a
// directory into a manifest, verification (size first, then SHA-256), and the manifests the
// project ships, embedded into the binary at build time.
#include "format/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "util/error.h"
#include "util/fs.h"

namespace drama {

// Defined in the file CMake generates from checkpoints/*.json and configs/*.json; the list ends
// with {nullptr, nullptr}.
struct EmbeddedJson {
  const char* path;
  const char* text;
};
extern const EmbeddedJson kEmbeddedJson[];

namespace {

bool is_hex(const std::string& s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A Hugging Face-style name part: letters, digits, '.', '_', '-', and not "." or "..".
bool is_name_part(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 96) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

// Why `path` is not a safe relative '/'-separated path, or empty when it is.
std::string bad_path_reason(const std::string& path) {
  if (path.empty()) return "is empty";
  if (path.front() == '/') return "is absolute";
  if (path.find('\\') != std::string::npos) return "contains a backslash";
  if (path.find('\0') != std::string::npos) return "contains a NUL byte";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "..") return "contains '..'";
    if (part.empty() || part == ".") return "has an empty or '.' component";
    start = end + 1;
  }
  return {};
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw Error(where + ": missing field '" + key + "'");
  return *it;
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_string()) throw Error(where + ": field '" + key + "' must be a string");
  return v.get<std::string>();
}

}  // namespace

Manifest parse_manifest(const nlohmann::json& j, const std::string& label) {
  const std::string where = "manifest " + label;
  if (!j.is_object()) throw Error(where + ": must be a JSON object");
  Manifest m;
  m.name = string_field(j, "name", where);
  // The name becomes the cache directory's name, so it must be one safe path component.
  if (!is_name_part(m.name))
    throw Error(where + ": name '" + m.name + "' must be letters, digits, '.', '_' or '-'");
  if (j.contains("weights")) m.weights = string_field(j, "weights", where);
  m.repo = string_field(j, "repo", where);
  const size_t slash = m.repo.find('/');
  if (slash == std::string::npos || !is_name_part(m.repo.substr(0, slash)) ||
      !is_name_part(m.repo.substr(slash + 1)))
    throw Error(where + ": repo '" + m.repo + "' must be \"owner/name\"");
  m.revision = string_field(j, "revision", where);
  if (!is_hex(m.revision, 40))
    throw Error(where + ": revision '" + m.revision + "' must be 40 hex digits (a commit id)");
  m.revision = lower(m.revision);

  const auto& files = field(j, "files", where);
  if (!files.is_array() || files.empty()) throw Error(where + ": files must be a non-empty list");
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string at = where + ": files[" + std::to_string(i) + "]";
    const auto& f = files[i];
    if (!f.is_object()) throw Error(at + " must be an object");
    ManifestFile mf;
    mf.path = string_field(f, "path", at);
    if (const std::string why = bad_path_reason(mf.path); !why.empty())
      throw Error(at + ".path '" + mf.path + "' " + why);
    if (!seen.insert(mf.path).second) throw Error(at + ".path '" + mf.path + "' is listed twice");
    const auto& size = field(f, "size", at);
    if (!size.is_number_integer() || (!size.is_number_unsigned() && size.get<int64_t>() < 0))
      throw Error(at + ".size must be a non-negative integer (file " + mf.path + ")");
    mf.size = size.get<uint64_t>();
    mf.sha256 = string_field(f, "sha256", at);
    if (!is_hex(mf.sha256, 64))
      throw Error(at + ".sha256 must be 64 hex digits (file " + mf.path + ")");
    mf.sha256 = lower(mf.sha256);
    m.files.push_back(std::move(mf));
  }
  return m;
}

Manifest load_manifest(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("manifest " + path.string() + " is not valid JSON: " + e.what());
  }
  return parse_manifest(j, path.string());
}

nlohmann::json manifest_to_json(const Manifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files)
    files.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  return {{"name", m.name},
          {"weights", m.weights},
          {"repo", m.repo},
          {"revision", m.revision},
          {"files", files}};
}

Manifest compute_manifest(const std::filesystem::path& dir, const std::vector<std::string>& files,
                          const std::string& name, const std::string& weights,
                          const std::string& repo, const std::string& revision) {
  Manifest m{name, weights, repo, revision, {}};
  for (const auto& rel : files) {
    const auto p = dir / rel;
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(p, ec);
    if (ec) throw Error("cannot read " + p.string() + ": " + ec.message());
    m.files.push_back({rel, size, sha256_file(p)});
  }
  // Round-trip through the parser so a computed manifest obeys the same rules as a loaded one.
  return parse_manifest(manifest_to_json(m), "computed for " + dir.string());
}

std::string content_revision(const std::vector<ManifestFile>& files) {
  std::string digest;
  for (const auto& f : files) digest += f.path + " " + f.sha256 + "\n";
  return sha256_hex({reinterpret_cast<const uint8_t*>(digest.data()), digest.size()}).substr(0, 40);
}

Manifest pin_local_checkpoint(const std::filesystem::path& dir, std::vector<std::string> files,
                              const std::string& name, const std::string& weights,
                              const std::string& repo) {
  std::sort(files.begin(), files.end());
  Manifest m = compute_manifest(dir, files, name, weights, repo, std::string(40, '0'));
  m.revision = content_revision(m.files);
  return m;
}

void write_manifest(const std::filesystem::path& path, const Manifest& manifest) {
  write_text_file_atomic(path, manifest_to_json(manifest).dump(2) + "\n");
}

VerifyReport verify_directory(const std::filesystem::path& dir, const Manifest& manifest,
                              const std::function<void(uint64_t)>& on_bytes) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  // Sizes of every file first: a missing or truncated shard is reported at once, before hours of
  // hashing, and only files of the right size are hashed.
  std::vector<const ManifestFile*> to_hash;
  for (const auto& f : manifest.files) {
    struct stat st {};
    const auto p = dir / f.path;
    if (::stat(p.c_str(), &st) != 0) {
      report.problems.push_back(
          {f.path, errno == ENOENT || errno == ENOTDIR ? "missing" : std::strerror(errno)});
    } else if (!S_ISREG(st.st_mode)) {
      report.problems.push_back({f.path, "not a regular file"});
    } else if (static_cast<uint64_t>(st.st_size) != f.size) {
      report.problems.push_back({f.path, "size " + std::to_string(st.st_size) +
                                             " != " + std::to_string(f.size) + " (manifest)"});
    } else {
      to_hash.push_back(&f);
    }
  }
  for (const ManifestFile* f : to_hash) {
    try {
      const std::string hash = sha256_file(dir / f->path, on_bytes);
      report.bytes_hashed += f->size;
      if (hash != f->sha256) report.problems.push_back({f->path, "sha256 mismatch"});
    } catch (const Error& e) {
      report.problems.push_back({f->path, e.what()});
    }
  }
  // Report in manifest order whatever step found the problem.
  std::vector<VerifyProblem> ordered;
  for (const auto& f : manifest.files)
    for (const auto& p : report.problems)
      if (p.path == f.path) ordered.push_back(p);
  report.problems = std::move(ordered);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::optional<std::string> embedded_json_text(const std::string& path) {
  for (const EmbeddedJson* e = kEmbeddedJson; e->path; ++e)
    if (path == e->path) return std::string(e->text);
  return std::nullopt;
}

std::optional<Manifest> pinned_manifest(const std::string& weights) {
  if (!is_name_part(weights)) return std::nullopt;
  const std::string path = "checkpoints/" + weights + ".json";
  const auto text = embedded_json_text(path);
  if (!text) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("shipped manifest " + path + " is not valid JSON: " + e.what());
  }
  Manifest m = parse_manifest(j, path + " (shipped)");
  if (m.weights != weights)
    throw Error("shipped manifest " + path + " says weights '" + m.weights + "', expected '" +
                weights + "'");
  return m;
}

std::vector<std::string> pinned_weights() {
  std::vector<std::string> out;
  const std::string prefix = "checkpoints/", suffix = ".json";
  for (const EmbeddedJson* e = kEmbeddedJson; e->path; ++e) {
    const std::string p = e->path;
    if (p.rfind(prefix, 0) == 0 && p.size() > prefix.size() + suffix.size() &&
        p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        p.find('/', prefix.size()) == std::string::npos)
      out.push_back(p.substr(prefix.size(), p.size() - prefix.size() - suffix.size()));
  }
  return out;
}

}  // namespace drama

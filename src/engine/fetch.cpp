// Producing a missing checkpoint directory (spec section 9): download with libcurl, or local
// regeneration of the bundled "mini" model, always into a temporary sibling that is verified file
// by file and renamed into place only when complete. Nothing is left behind on failure.
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>

#include "engine/launcher.h"
#include "format/random_checkpoint.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/progress.h"

namespace drama {

namespace fs = std::filesystem;

namespace {

// The regeneration recipe of the pinned "mini" manifest: `drama make-checkpoint --config
// configs/mini.json --seed 1 --nvfp4` (docs/provenance.md). The pinned hashes decide whether it
// matched; nothing here is trusted without them.
constexpr uint64_t kMiniSeed = 1;

// Removes the temporary directory unless the work succeeded.
class TempDir {
 public:
  explicit TempDir(const fs::path& dest) {
    const fs::path parent = dest.has_parent_path() ? dest.parent_path() : fs::path(".");
    fs::create_directories(parent);
    std::random_device rd;
    path_ = parent / ("." + dest.filename().string() + ".partial-" + std::to_string(::getpid()) +
                      "-" + std::to_string(rd()));
    if (!fs::create_directory(path_))
      throw Error("cannot create temporary directory " + path_.string());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Renames `from` to `to` without ever replacing something at `to`.
void rename_no_replace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    fsync_directory(to.parent_path());
    return;
  }
  if (errno == EEXIST)
    throw Error("destination " + to.string() + " appeared while fetching; it was left untouched");
  throw Error("cannot rename " + from.string() + " to " + to.string() + ": " +
              std::strerror(errno));
}

// Stream state of one file's transfer: written, hashed and counted as it arrives.
struct Transfer {
  int fd = -1;
  Sha256 hash;
  uint64_t received = 0;
  uint64_t expected = 0;
  Progress* progress = nullptr;
  std::string error;
};

size_t on_data(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  if (t->received + bytes > t->expected) {
    t->error = "the server sent more than the manifest's " + std::to_string(t->expected) + " bytes";
    return 0;  // aborts the transfer
  }
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::write(t->fd, data + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      t->error = std::string("cannot write: ") + std::strerror(errno);
      return 0;
    }
    done += static_cast<size_t>(n);
  }
  t->hash.update(data, bytes);
  t->received += bytes;
  if (t->progress) t->progress->add(bytes);
  return bytes;
}

std::string url_for(const std::string& endpoint, const Manifest& m, const std::string& path,
                    CURL* curl) {
  std::string base = endpoint;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string url = base + "/" + m.repo + "/resolve/" + m.revision;
  size_t start = 0;
  while (start <= path.size()) {  // escape each path component, keep the '/' separators
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    char* escaped = curl_easy_escape(curl, part.c_str(), static_cast<int>(part.size()));
    url += "/" + std::string(escaped ? escaped : "");
    curl_free(escaped);
    start = end + 1;
  }
  return url;
}

void download_file(CURL* curl, const std::string& url, const ManifestFile& f, const fs::path& out,
                   const FetchOptions& options, Progress& progress) {
  fs::create_directories(out.parent_path());
  Transfer t;
  t.expected = f.size;
  t.progress = &progress;
  t.fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (t.fd < 0) throw Error("cannot create " + out.string() + ": " + std::strerror(errno));
  char curl_error[CURL_ERROR_SIZE] = {};
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_s);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, options.low_speed_limit_bytes_s);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options.low_speed_time_s);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "drama/0.1");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  // A Hugging Face token, when the user has one, for gated repositories. curl does not pass a
  // custom Authorization header on to a redirect's other host (the CDN).
  struct curl_slist* headers = nullptr;
  if (const char* token = std::getenv("HF_TOKEN"); token && *token)
    headers = curl_slist_append(headers, (std::string("Authorization: Bearer ") + token).c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  const bool synced = ::fsync(t.fd) == 0;
  ::close(t.fd);

  const std::string what = "download of " + f.path + " from " + url + " failed: ";
  if (rc != CURLE_OK) {
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (!t.error.empty()) throw Error(what + t.error);
    if (rc == CURLE_HTTP_RETURNED_ERROR) throw Error(what + "HTTP " + std::to_string(status));
    if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING)
      throw Error(what + "connection dropped after " + std::to_string(t.received) + " of " +
                  std::to_string(f.size) + " bytes");
    throw Error(what + (curl_error[0] ? curl_error : curl_easy_strerror(rc)));
  }
  if (t.received != f.size)
    throw Error(what + "size " + std::to_string(t.received) + " != " + std::to_string(f.size) +
                " (manifest)");
  if (t.hash.hex() != f.sha256) throw Error(what + "sha256 mismatch (corrupted in transfer)");
  if (!synced) throw Error(what + "cannot write " + out.string() + ": " + std::strerror(errno));
}

void download_into(const Manifest& m, const fs::path& dir, const FetchOptions& options) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* curl = curl_easy_init();
  if (!curl) throw Error("libcurl initialisation failed");
  std::unique_ptr<CURL, void (*)(CURL*)> guard(curl, curl_easy_cleanup);
  const std::string endpoint = options.endpoint.empty() ? default_endpoint() : options.endpoint;
  uint64_t total = 0;
  for (const auto& f : m.files) total += f.size;
  Progress progress("fetch " + m.name, total, options.progress);
  for (const auto& f : m.files)
    download_file(curl, url_for(endpoint, m, f.path, curl), f, dir / f.path, options, progress);
  progress.finish();
  fsync_directory(dir);
}

void regenerate_mini_into(const Manifest& m, const fs::path& out, const FetchOptions& options) {
  const auto text = embedded_json_text("configs/mini.json");
  if (!text)
    throw Error(
        "configs/mini.json was not embedded at build time, so the mini checkpoint cannot "
        "be regenerated");
  RandomCheckpointOptions o;
  o.config = nlohmann::json::parse(*text);
  o.seed = kMiniSeed;
  o.nvfp4 = true;
  write_random_checkpoint(o, out);
  uint64_t total = 0;
  for (const auto& f : m.files) total += f.size;
  Progress progress("verify " + m.name, total, options.progress);
  const VerifyReport r = verify_directory(out, m, [&](uint64_t n) { progress.add(n); });
  progress.finish();
  if (!r.ok())
    throw Error("the regenerated mini checkpoint does not match the pinned manifest (" +
                r.problems.front().path + ": " + r.problems.front().reason +
                "); this build's generator differs from the one the manifest was made with");
}

}  // namespace

CheckpointSource checkpoint_source(const Manifest& manifest, bool pinned) {
  if (pinned && manifest.weights == "mini") return CheckpointSource::regenerate_mini;
  if (pinned && manifest.weights == kBundledWeights) return CheckpointSource::bundled;
  return CheckpointSource::download;
}

void materialize_checkpoint(const Manifest& manifest, CheckpointSource source, const fs::path& dest,
                            const FetchOptions& options) {
  if (fs::exists(fs::symlink_status(dest)))
    throw Error("destination " + dest.string() + " already exists; it is never replaced");
  if (source == CheckpointSource::bundled)
    throw Error("weights '" + manifest.weights +
                "' are the model bundled with the repository (models/" + manifest.weights +
                "): they are read in place, never downloaded or regenerated");
  TempDir tmp(dest);
  if (source == CheckpointSource::regenerate_mini) {
    // write_random_checkpoint wants a directory that does not exist yet.
    const fs::path out = tmp.path() / "checkpoint";
    regenerate_mini_into(manifest, out, options);
    rename_no_replace(out, dest);
  } else {
    download_into(manifest, tmp.path(), options);
    rename_no_replace(tmp.path(), dest);
  }
}

}  // namespace drama

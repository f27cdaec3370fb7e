// Launcher policy (spec section 9, interfaces.md `serve`/`say`): pick the manifest, produce a
// missing default directory before the device lock, then verify every listed file under it.
#include "engine/launcher.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/progress.h"

namespace drama {

namespace fs = std::filesystem;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// Device ids become part of a file name: keep them to a safe alphabet.
std::string safe_device_id(const std::string& id) {
  if (id.empty()) throw UsageError("device id for the lock is empty");
  std::string out = id;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return out;
}

}  // namespace

std::vector<fs::path> bundled_model_roots() {
  if (const char* v = std::getenv("DRAMA_MODELS_DIR"); v && *v) return {fs::path(v)};
  std::vector<fs::path> roots;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path())
    roots.push_back((exe.parent_path() / ".." / "share" / "drama" / "models").lexically_normal());
#ifdef DRAMA_SOURCE_MODELS_DIR
  roots.emplace_back(DRAMA_SOURCE_MODELS_DIR);
#endif
  return roots;
}

std::optional<fs::path> find_bundled_model(const std::string& weights) {
  for (const fs::path& root : bundled_model_roots()) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(root / weights, ec))) return root / weights;
  }
  return std::nullopt;
}

std::string default_weights() {
  return find_bundled_model(kBundledWeights) ? kBundledWeights : "mini";
}

fs::path default_cache_dir() {
  if (const char* v = std::getenv("DRAMA_CACHE"); v && *v) return v;
  const char* home = std::getenv("HOME");
  if (!home || !*home) throw Error("neither DRAMA_CACHE nor HOME is set; cannot place the cache");
  return fs::path(home) / ".cache" / "drama";
}

std::string default_endpoint() {
  return env_or("DRAMA_ENDPOINT", "https://huggingface.co");
}

fs::path default_lock_dir() {
  if (const char* v = std::getenv("DRAMA_LOCK_DIR"); v && *v) return v;
  return default_cache_dir() / "locks";
}

SelectedManifest select_manifest(const WeightsSelection& selection) {
  SelectedManifest s;
  if (selection.manifest) {
    s.manifest = load_manifest(*selection.manifest);
    s.provenance = "override:" + s.manifest.name;
    return s;
  }
  auto pinned = pinned_manifest(selection.weights);
  if (!pinned)
    throw UsageError("no pinned manifest is shipped for weights '" + selection.weights +
                     "'; pass --manifest FILE");
  s.manifest = std::move(*pinned);
  s.pinned = true;
  s.provenance = "pinned:" + s.manifest.repo + "@" + s.manifest.revision;
  return s;
}

fs::path default_checkpoint_dir(const Manifest& manifest, const fs::path& cache_dir) {
  return (cache_dir.empty() ? default_cache_dir() : cache_dir) / manifest.name;
}

std::string describe_problems(const fs::path& dir, const Manifest& manifest,
                              const VerifyReport& report) {
  std::string s = "checkpoint " + dir.string() + " does not match manifest '" + manifest.name +
                  "' (" + std::to_string(report.problems.size()) + " of " +
                  std::to_string(manifest.files.size()) + " files bad: ";
  for (size_t i = 0; i < report.problems.size(); ++i)
    s += (i ? "; " : "") + report.problems[i].path + ": " + report.problems[i].reason;
  return s + "); it was left untouched";
}

DeviceLock::DeviceLock(const std::string& device_id, const fs::path& lock_dir)
    : path_(lock_dir / ("drama-" + safe_device_id(device_id) + ".lock")) {
  std::error_code ec;
  fs::create_directories(lock_dir, ec);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open lock file " + path_.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw Error("cannot lock " + path_.string() + ": " + std::strerror(err));
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw Error("device " + device_id + " is in use by process " +
                (pid.empty() ? "(pid not yet written)" : pid) + " (lock file " + path_.string() +
                ")");
  }
  // The holder's pid, for the refusal of the next one; the lock itself is the flock.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock is held even if the pid could not be recorded; say nothing more.
  }
}

DeviceLock::~DeviceLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // Best effort: a stale pid is harmless, the flock is what counts.
  }
  ::close(fd_);  // releases the flock
}

ResolvedCheckpoint resolve_checkpoint(const WeightsSelection& selection,
                                      const std::string& device_id, const fs::path& lock_dir) {
  SelectedManifest selected = select_manifest(selection);
  ResolvedCheckpoint r;
  r.manifest = std::move(selected.manifest);
  r.provenance = std::move(selected.provenance);
  if (selection.checkpoint) {
    // An explicit directory is verified like any other, but never downloaded into.
    r.dir = *selection.checkpoint;
    if (!fs::is_directory(r.dir))
      throw Error("checkpoint directory " + r.dir.string() + " does not exist");
  } else if (checkpoint_source(r.manifest, selected.pinned) == CheckpointSource::bundled) {
    // The bundled model is read where it lies: never copied, repaired or regenerated.
    const auto found = find_bundled_model(selection.weights);
    if (!found) {
      std::string looked;
      for (const auto& root : bundled_model_roots())
        looked += (looked.empty() ? "" : ", ") + (root / selection.weights).string();
      throw Error("weights '" + selection.weights +
                  "' are the model bundled with the repository (models/" + selection.weights +
                  "), read in place, and none was found (looked in: " +
                  (looked.empty() ? "nowhere" : looked) + ")");
    }
    r.dir = *found;
    if (!fs::is_directory(r.dir))
      throw Error("bundled model " + r.dir.string() + " exists but is not a directory");
  } else {
    r.dir = default_checkpoint_dir(r.manifest, selection.cache_dir);
    if (!fs::exists(fs::symlink_status(r.dir))) {
      // Downloading or generating happens before the lock: it needs no device.
      FetchOptions options;
      options.endpoint = selection.endpoint;
      materialize_checkpoint(r.manifest, checkpoint_source(r.manifest, selected.pinned), r.dir,
                             options);
    } else if (!fs::is_directory(r.dir)) {
      throw Error("checkpoint path " + r.dir.string() + " exists but is not a directory");
    }
  }
  r.lock = std::make_unique<DeviceLock>(device_id, lock_dir);
  uint64_t total = 0;
  for (const auto& f : r.manifest.files) total += f.size;
  Progress progress("verify " + r.manifest.name, total);
  const VerifyReport report =
      verify_directory(r.dir, r.manifest, [&](uint64_t n) { progress.add(n); });
  progress.finish();
  if (!report.ok()) {
    std::string why = describe_problems(r.dir, r.manifest, report);
    // A directory of one's own is verified against the default pinned manifest unless told
    // otherwise: say how to name its manifest.
    if (selection.checkpoint && !selection.manifest)
      why += "; it was checked against the pinned manifest of --weights " + selection.weights +
             ": to verify it against its own manifest, pass --manifest FILE (e.g. --manifest " +
             (r.dir / "manifest.json").string() + ")";
    throw Error(why);
  }
  return r;
}

}  // namespace drama

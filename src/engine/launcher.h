// Launcher policy (spec section 9, interfaces.md `serve`/`say`): which checkpoint runs, its
// verification, provenance label and the per-device lock.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/manifest.h"

namespace drama {

struct WeightsSelection {
  std::string weights = "mini";  // --weights: a shipped pinned manifest (CLI: default_weights())
  std::optional<std::filesystem::path> checkpoint;  // --checkpoint DIR
  std::optional<std::filesystem::path> manifest;    // --manifest FILE (user-named: override)
  std::string endpoint;                             // --endpoint or DRAMA_ENDPOINT
  std::filesystem::path cache_dir;                  // default: $DRAMA_CACHE or ~/.cache/drama
};

// An exclusive lock per device (flock on a lock file). A second holder is refused with one clear
// error naming the holder's pid. Released on destruction.
class DeviceLock {
 public:
  DeviceLock(const std::string& device_id, const std::filesystem::path& lock_dir);
  ~DeviceLock();
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

struct ResolvedCheckpoint {
  std::filesystem::path dir;
  Manifest manifest;
  std::string provenance;  // "pinned:<repo>@<revision>" or "override:<manifest name>"
  std::unique_ptr<DeviceLock> lock;
};

// The manifest a selection names: the user's --manifest (label "override:<name>") or else the
// pinned manifest shipped for --weights (label "pinned:<repo>@<revision>"). Weights with no
// shipped manifest are refused (UsageError) with a hint to pass --manifest.
struct SelectedManifest {
  Manifest manifest;
  bool pinned = false;
  std::string provenance;
};
SelectedManifest select_manifest(const WeightsSelection& selection);

// $DRAMA_CACHE, else ~/.cache/drama (the parent of every default checkpoint directory).
std::filesystem::path default_cache_dir();
// $DRAMA_ENDPOINT, else https://huggingface.co.
std::string default_endpoint();
// $DRAMA_LOCK_DIR, else <default_cache_dir()>/locks.
std::filesystem::path default_lock_dir();

struct FetchOptions {
  std::string endpoint;  // empty: default_endpoint()
  long connect_timeout_s = 30;
  long low_speed_limit_bytes_s = 1024;  // a transfer slower than this ...
  long low_speed_time_s = 60;           // ... for this long is abandoned
  bool progress = true;                 // drawn only when stderr is a terminal
};

// The model bundled with the repository (issue 14): models/drama-mini, pinned by
// checkpoints/drama-mini.json, read in place (never copied into the cache, never downloaded or
// regenerated; docs/decisions.md).
inline constexpr const char* kBundledWeights = "drama-mini";

// The folders searched for bundled models, in order: $DRAMA_MODELS_DIR alone when it is set (tests,
// relocated data); else <the executable's folder>/../share/drama/models (an installed drama), then
// the source tree's models/ (fixed at configure time: a build inside a clone).
std::vector<std::filesystem::path> bundled_model_roots();
// <root>/<weights> in the first root where something of that name exists (a file that is not a
// directory, or a partial one, is then refused by verification, never skipped).
std::optional<std::filesystem::path> find_bundled_model(const std::string& weights);
// The weights a command uses when --weights is not given: "drama-mini" when it is bundled
// (find_bundled_model), else "mini" (the random model, generated into the cache).
std::string default_weights();

// How a missing checkpoint directory is produced: the shipped "mini" manifest is regenerated
// locally (write_random_checkpoint from the embedded configs/mini.json, seed 1, NVFP4); every
// other manifest is downloaded from {endpoint}/{repo}/resolve/{revision}/{path}, except the
// shipped manifest of the bundled model (kBundledWeights), which is never produced: it is read
// where find_bundled_model finds it (materialize_checkpoint refuses it).
enum class CheckpointSource { download, regenerate_mini, bundled };
CheckpointSource checkpoint_source(const Manifest& manifest, bool pinned);

// Produces `dest` (which must not exist) from `source`: everything is written into a temporary
// sibling directory, each file verified against `manifest` (size, then SHA-256), and only then is
// the temporary directory renamed to `dest` (never replacing anything there). On any failure the
// temporary directory is removed and one Error names the file and the reason.
void materialize_checkpoint(const Manifest& manifest, CheckpointSource source,
                            const std::filesystem::path& dest, const FetchOptions& options);

// The default directory of a manifest: <cache_dir or default_cache_dir()>/<manifest name>.
std::filesystem::path default_checkpoint_dir(const Manifest& manifest,
                                             const std::filesystem::path& cache_dir);

// One sentence listing every problem of a failed verification, for refusals.
std::string describe_problems(const std::filesystem::path& dir, const Manifest& manifest,
                              const VerifyReport& report);

// Resolves the selection: the bundled model is read in place (find_bundled_model; refused when
// absent); a missing default directory is downloaded (or, for "mini", generated) before the lock;
// then the device lock is taken; then every listed file is verified under the lock. Refuses an
// incomplete or modified directory with the list of bad files, never repairing it.
ResolvedCheckpoint resolve_checkpoint(const WeightsSelection& selection,
                                      const std::string& device_id,
                                      const std::filesystem::path& lock_dir);

}  // namespace drama

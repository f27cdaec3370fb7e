// Launcher policy (spec section 9, interfaces.md `serve`/`say`): which checkpoint runs, its
// verification, provenance label and the per-device lock.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "format/manifest.h"

namespace drama {

struct WeightsSelection {
  std::string weights = "mini";                     // --weights: a shipped pinned manifest
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

// Resolves the selection: a missing default directory is downloaded (or, for "mini", generated)
// before the lock; then the device lock is taken; then every listed file is verified under the
// lock. Refuses an incomplete or modified directory with the list of bad files, never repairing it.
ResolvedCheckpoint resolve_checkpoint(const WeightsSelection& selection,
                                      const std::string& device_id,
                                      const std::filesystem::path& lock_dir);

}  // namespace drama

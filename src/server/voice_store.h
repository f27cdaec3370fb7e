// Stored voices (interfaces.md, serving rules): <id>.voice (spec section 8, written atomically by
// write_voice) plus <id>.json with the display name and creation time, both in one directory.
// Ids are [A-Za-z0-9_-]{1,64}, so a file name built from one never leaves the directory.
// Beside them, read-only, the loaded checkpoint's built-in voices (format/builtin_voices.h):
// listed and usable like stored ones, never deleted, and their ids are never given to another.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "format/builtin_voices.h"
#include "format/voice.h"

namespace drama::server {

struct VoiceInfo {
  std::string id;
  std::string name;
  std::string transcript;
  int64_t frames = 0;
  int64_t created = 0;  // unix seconds
  bool built_in = false;
};

class VoiceStore {
 public:
  // Creates the directory if needed. Voices written by an earlier run are found on disk. An
  // empty `dir` stores nothing: only the built-in voices are there. Throws drama::Error when the
  // directory holds a voice whose id is a built-in one (one of the two would be unreachable).
  explicit VoiceStore(std::filesystem::path dir, std::vector<BuiltinVoice> built_in = {});

  // The built-in voices (sorted by id), then the stored ones (sorted by id).
  std::vector<VoiceInfo> list() const;
  // nullptr when there is no such voice; throws drama::Error when its file is unreadable.
  std::shared_ptr<const Voice> get(const std::string& id) const;
  std::optional<VoiceInfo> info(const std::string& id) const;
  bool is_built_in(const std::string& id) const;
  // Whether voices can be added (a directory was given).
  bool writable() const { return !dir_.empty(); }
  // Throws ApiError 400 for a bad or taken id (a built-in id is taken).
  VoiceInfo add(const std::string& id, const std::string& name, const Voice& voice);
  // False when there is no such stored voice; throws ApiError 403 for a built-in voice (nothing
  // changes).
  bool remove(const std::string& id);

  // An id derived from a display name: its [A-Za-z0-9_-] characters (others become '-'),
  // at most 48, made unique with a numeric suffix.
  std::string id_for_name(const std::string& name) const;

 private:
  std::filesystem::path voice_path(const std::string& id) const;
  std::filesystem::path sidecar_path(const std::string& id) const;
  std::optional<VoiceInfo> read_info(const std::string& id) const;

  std::filesystem::path dir_;
  std::map<std::string, BuiltinVoice> built_in_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const Voice>> cache_;
};

}  // namespace drama::server

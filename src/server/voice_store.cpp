#include "server/voice_store.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/speech_request.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama::server {

namespace fs = std::filesystem;

VoiceStore::VoiceStore(fs::path dir, std::vector<BuiltinVoice> built_in) : dir_(std::move(dir)) {
  for (auto& v : built_in) {
    if (!is_valid_voice_id(v.id) || !v.voice)
      throw Error("built-in voice '" + v.id + "' has an invalid id or no voice");
    std::string id = v.id;
    if (!built_in_.emplace(id, std::move(v)).second)
      throw Error("built-in voice '" + id + "' is given twice");
  }
  if (dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw Error("voices directory " + dir_.string() + " cannot be created: " + ec.message());
  }
  for (const auto& [id, v] : built_in_) {
    if (fs::exists(voice_path(id), ec))
      throw Error("voices directory " + dir_.string() + " holds a voice '" + id +
                  "', which is also a built-in voice of the checkpoint; rename or remove " +
                  voice_path(id).string() + " and " + sidecar_path(id).string());
  }
}

bool VoiceStore::is_built_in(const std::string& id) const {
  return built_in_.count(id) > 0;
}

fs::path VoiceStore::voice_path(const std::string& id) const {
  if (!is_valid_voice_id(id)) throw ApiError(400, "invalid_voice_id", "invalid voice id", "id");
  return dir_ / (id + ".voice");
}

fs::path VoiceStore::sidecar_path(const std::string& id) const {
  if (!is_valid_voice_id(id)) throw ApiError(400, "invalid_voice_id", "invalid voice id", "id");
  return dir_ / (id + ".json");
}

std::optional<VoiceInfo> VoiceStore::read_info(const std::string& id) const {
  if (auto b = built_in_.find(id); b != built_in_.end()) {
    const BuiltinVoice& v = b->second;
    return VoiceInfo{v.id, v.name, v.voice->transcript, v.voice->frames, v.created, true};
  }
  if (dir_.empty()) return std::nullopt;
  fs::path vp = voice_path(id);
  std::error_code ec;
  if (!fs::is_regular_file(vp, ec)) return std::nullopt;
  VoiceInfo info;
  info.id = id;
  info.name = id;
  auto mtime = fs::last_write_time(vp, ec);
  if (!ec) {
    // file_clock -> system_clock by the offset between the two clocks now (GCC 12 has no
    // clock_cast).
    auto sys = std::chrono::system_clock::now() +
               std::chrono::duration_cast<std::chrono::system_clock::duration>(
                   mtime - fs::file_time_type::clock::now());
    info.created = std::chrono::duration_cast<std::chrono::seconds>(sys.time_since_epoch()).count();
  }
  try {
    auto j = nlohmann::json::parse(read_text_file(sidecar_path(id)));
    if (j.contains("name") && j["name"].is_string()) info.name = j["name"];
    if (j.contains("created") && j["created"].is_number_integer()) info.created = j["created"];
  } catch (const std::exception&) {
    // A missing or damaged sidecar only loses the display name; the voice itself is intact.
  }
  auto voice = get(id);
  if (!voice) return std::nullopt;
  info.transcript = voice->transcript;
  info.frames = voice->frames;
  return info;
}

std::vector<VoiceInfo> VoiceStore::list() const {
  std::vector<VoiceInfo> out;
  for (const auto& [id, v] : built_in_) out.push_back(*read_info(id));
  if (dir_.empty()) return out;
  std::vector<VoiceInfo> stored;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".voice") continue;
    std::string id = entry.path().stem().string();
    // A file that appeared under a built-in id is not reachable (the built-in voice wins).
    if (!is_valid_voice_id(id) || is_built_in(id)) continue;
    try {
      if (auto info = read_info(id)) stored.push_back(*info);
    } catch (const std::exception&) {
      // An unreadable file is skipped here and refused with its reason when used.
    }
  }
  std::sort(stored.begin(), stored.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  out.insert(out.end(), stored.begin(), stored.end());
  return out;
}

std::shared_ptr<const Voice> VoiceStore::get(const std::string& id) const {
  if (auto b = built_in_.find(id); b != built_in_.end()) return b->second.voice;
  if (dir_.empty()) return nullptr;
  fs::path vp = voice_path(id);
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
  }
  std::error_code ec;
  if (!fs::is_regular_file(vp, ec)) return nullptr;
  auto voice = std::make_shared<const Voice>(read_voice(vp));
  std::lock_guard lock(mutex_);
  cache_[id] = voice;
  return voice;
}

std::optional<VoiceInfo> VoiceStore::info(const std::string& id) const {
  return read_info(id);
}

VoiceInfo VoiceStore::add(const std::string& id, const std::string& name, const Voice& voice) {
  if (!is_valid_voice_id(id)) {
    throw ApiError(400, "invalid_voice_id",
                   "voice id must be 1 to 64 characters from [A-Za-z0-9_-]", "id");
  }
  if (is_built_in(id)) {
    throw ApiError(400, "voice_exists",
                   "'" + id + "' is the id of a built-in voice of the loaded checkpoint", "id");
  }
  if (dir_.empty()) {
    throw ApiError(400, "voices_disabled", "this server has no --voices directory");
  }
  std::lock_guard lock(mutex_);
  std::error_code ec;
  if (fs::exists(voice_path(id), ec)) {
    throw ApiError(400, "voice_exists", "a voice with id '" + id + "' already exists", "id");
  }
  auto now = std::chrono::system_clock::now();
  int64_t created =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  // Sidecar first: a voice file is only listed once it exists, and then it has its name.
  nlohmann::json side = {{"name", name}, {"created", created}};
  write_text_file_atomic(sidecar_path(id), side.dump() + "\n");
  write_voice(voice_path(id), voice);
  cache_[id] = std::make_shared<const Voice>(voice);
  return VoiceInfo{id, name, voice.transcript, voice.frames, created, false};
}

bool VoiceStore::remove(const std::string& id) {
  if (is_built_in(id)) {
    throw ApiError(403, "voice_built_in",
                   "voice '" + id +
                       "' is built into the loaded checkpoint and cannot be deleted (it is "
                       "part of the checkpoint's verified files)",
                   "id");
  }
  if (dir_.empty()) return false;
  fs::path vp = voice_path(id);
  std::lock_guard lock(mutex_);
  cache_.erase(id);
  std::error_code ec;
  bool removed = fs::remove(vp, ec);
  fs::remove(sidecar_path(id), ec);
  if (removed) fsync_directory(dir_);
  return removed;
}

std::string VoiceStore::id_for_name(const std::string& name) const {
  std::string base;
  for (char c : name) {
    if (base.size() >= 48) break;
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    base += ok ? c : '-';
  }
  if (base.empty()) base = "voice";
  std::error_code ec;
  std::string id = base;
  auto taken = [&](const std::string& candidate) {
    return is_built_in(candidate) || (!dir_.empty() && fs::exists(voice_path(candidate), ec));
  };
  for (int n = 2; taken(id); ++n) id = base + "-" + std::to_string(n);
  return id;
}

}  // namespace drama::server

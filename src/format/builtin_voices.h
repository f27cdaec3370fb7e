// Built-in voices of a checkpoint (docs/checkpoints.md, "Built-in voices"): voices/<id>.voice (a
// spec section 8 voice file encoded with the checkpoint's own codec/) plus voices/<id>.json
// ({"name", "created"}). They are files of the checkpoint: listed in its manifest and verified
// with it, never loaded unverified.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "format/voice.h"

namespace drama {

inline constexpr const char* kBuiltinVoicesDir = "voices";

struct BuiltinVoice {
  std::string id;
  std::string name;
  int64_t created = 0;  // unix seconds; 0 when the checkpoint does not say
  std::shared_ptr<const Voice> voice;
};

// The built-in voices of the checkpoint `dir`, verified against `manifest` (the manifest the
// checkpoint was verified against), sorted by id; empty when there is no voices/ directory and
// the manifest lists nothing under it. Every file under voices/ must be a regular file named
// <id>.voice or <id>.json (id as is_valid_voice_id), the two come in pairs, and each must be
// listed in the manifest. Each file is read once and its bytes are checked against the manifest
// (size and SHA-256) before they are parsed. Each voice must fit the checkpoint: num_codebooks,
// sample_rate and frame_rate of config.json's audio, codes below codebook_size, and codec_sha256
// equal to the manifest's hash of codec/model.safetensors. The first problem found is thrown as
// one drama::Error naming the checkpoint, the file and the reason.
std::vector<BuiltinVoice> load_builtin_voices(const std::filesystem::path& dir,
                                              const Manifest& manifest);

struct NewBuiltinVoice {
  std::string id;
  std::string name;  // default: the id
  int64_t created = 0;
  Voice voice;
};

// Throws (drama::Error) when `id` is not a valid voice id (UsageError) or DIR/voices already
// holds a file of that id. add_builtin_voice checks this too; callers may check before the work.
void check_builtin_id_free(const std::filesystem::path& dir, const std::string& id);

// Adds one built-in voice to the checkpoint `dir` and re-pins DIR/manifest.json, which
// `verified` is (the caller verified `dir` against it, e.g. through resolve_checkpoint):
// writes voices/<id>.json and voices/<id>.voice atomically, then a new manifest.json listing them
// too (files sorted by path, the content-derived revision; name, weights and repo kept), and
// loads the voices back as load_builtin_voices does. Refused (drama::Error, nothing written):
// a manifest whose revision is not content-derived (it names a commit the new files are not
// in), a manifest.json on disk that is not `verified`, an invalid or taken id, a voice that does
// not fit the checkpoint, existing built-in voices that do not load. A failure after the voice
// files were written removes them again, so the directory still matches its old manifest.
// Returns the new manifest.
Manifest add_builtin_voice(const std::filesystem::path& dir, const Manifest& verified,
                           const NewBuiltinVoice& voice);

}  // namespace drama

// Voice files (spec section 8) and codes files: safetensors with int32 `codes` [frames, K].
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace drama {

struct Voice {
  std::vector<int32_t> codes;  // [frames, num_codebooks] row-major
  int64_t frames = 0;
  int64_t num_codebooks = 0;
  std::string transcript;
  int64_t sample_rate = 24000;
  double frame_rate = 12.5;
  std::string codec_sha256;  // of codec/model.safetensors it was encoded with
};

// format = "drama-voice/1". Throws naming the file for anything malformed: a bad header, a
// format other than expected, missing or malformed metadata (sample_rate, frame_rate,
// num_codebooks, codec_sha256, and for voices a non-empty transcript), any tensor other than one
// I32 `codes` [frames >= 1, num_codebooks], or a negative code. Upper code bounds need the
// codec and are checked by its user (check_mimi_codes).
Voice read_voice(const std::filesystem::path& path);
Voice parse_voice(const std::vector<uint8_t>& bytes, const std::string& label);
void write_voice(const std::filesystem::path& path, const Voice& voice);  // atomic
std::vector<uint8_t> serialize_voice(const Voice& voice);

// A voice id (interfaces.md serving rules): [A-Za-z0-9_-]{1,64}, so a file name built from one
// never leaves its directory. Stored voices and a checkpoint's built-in voices alike.
bool is_valid_voice_id(std::string_view id);

// Codes files of `drama codec` and `drama logits`: format = "drama-codes/1", no transcript.
Voice read_codes(const std::filesystem::path& path);
Voice parse_codes(const std::vector<uint8_t>& bytes, const std::string& label);
void write_codes(const std::filesystem::path& path, const Voice& codes);  // atomic
std::vector<uint8_t> serialize_codes(const Voice& codes);

}  // namespace drama

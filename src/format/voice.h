// Voice files (spec section 8) and codes files: safetensors with int32 `codes` [frames, K].
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
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

// format = "drama-voice/1". Throws naming the file for anything malformed.
Voice read_voice(const std::filesystem::path& path);
Voice parse_voice(const std::vector<uint8_t>& bytes, const std::string& label);
void write_voice(const std::filesystem::path& path, const Voice& voice);  // atomic
std::vector<uint8_t> serialize_voice(const Voice& voice);

// Codes files of `drama codec` and `drama logits`: format = "drama-codes/1", no transcript.
Voice read_codes(const std::filesystem::path& path);
void write_codes(const std::filesystem::path& path, const Voice& codes);

}  // namespace drama

// Voice files and codes files (spec section 8): one int32 tensor `codes` [frames, K] plus string
// metadata. Parsing is strict: anything unexpected is refused with the file's name.
#include "format/voice.h"

#include <charconv>
#include <cstring>

#include "format/safetensors.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace {

constexpr const char* kVoiceFormat = "drama-voice/1";
constexpr const char* kCodesFormat = "drama-codes/1";
constexpr int64_t kMaxCodebooks = 64;

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest form that round-trips
  return std::string(buf, r.ptr);
}

const std::string& meta(const std::map<std::string, std::string>& m, const char* key,
                        const std::string& label) {
  auto it = m.find(key);
  if (it == m.end()) throw Error(label + ": metadata '" + key + "' is missing.");
  return it->second;
}

int64_t parse_int(const std::string& s, const char* key, const std::string& label) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw Error(label + ": metadata '" + key + "' must be an integer, not '" + s + "'.");
  return v;
}

double parse_double(const std::string& s, const char* key, const std::string& label) {
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw Error(label + ": metadata '" + key + "' must be a number, not '" + s + "'.");
  return v;
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

Voice parse(std::span<const uint8_t> bytes, const std::string& label, const char* format) {
  const SafetensorsHeader h = parse_safetensors_header(bytes, bytes.size(), label);
  const auto& m = h.metadata;
  const std::string& got = meta(m, "format", label);
  if (got != format) throw Error(label + ": format is '" + got + "', expected '" + format + "'.");
  Voice v;
  if (std::strcmp(format, kVoiceFormat) == 0) {
    v.transcript = meta(m, "transcript", label);
    if (v.transcript.empty()) throw Error(label + ": the transcript is empty.");
  }
  v.sample_rate = parse_int(meta(m, "sample_rate", label), "sample_rate", label);
  v.frame_rate = parse_double(meta(m, "frame_rate", label), "frame_rate", label);
  v.num_codebooks = parse_int(meta(m, "num_codebooks", label), "num_codebooks", label);
  v.codec_sha256 = meta(m, "codec_sha256", label);
  if (v.sample_rate <= 0 || v.sample_rate > 768000)
    throw Error(label + ": sample_rate " + std::to_string(v.sample_rate) + " is out of range.");
  if (!(v.frame_rate > 0 && v.frame_rate <= 1000))
    throw Error(label + ": frame_rate must be a positive number.");
  if (v.num_codebooks < 1 || v.num_codebooks > kMaxCodebooks)
    throw Error(label + ": num_codebooks " + std::to_string(v.num_codebooks) +
                " is out of range 1.." + std::to_string(kMaxCodebooks) + ".");
  if (!is_sha256_hex(v.codec_sha256))
    throw Error(label + ": codec_sha256 must be 64 lower-case hex digits.");
  if (h.tensors.size() != 1 || h.tensors[0].name != "codes")
    throw Error(label + ": must hold exactly one tensor, 'codes'.");
  const TensorInfo& t = h.tensors[0];
  if (t.dtype != DType::I32) throw Error(label + ": tensor 'codes' must be I32.");
  if (t.shape.size() != 2)
    throw Error(label + ": tensor 'codes' must have shape [frames, num_codebooks].");
  if (t.shape[1] != v.num_codebooks)
    throw Error(label + ": tensor 'codes' has " + std::to_string(t.shape[1]) +
                " codebooks but num_codebooks says " + std::to_string(v.num_codebooks) + ".");
  if (t.shape[0] < 1) throw Error(label + ": tensor 'codes' holds no frames.");
  v.frames = t.shape[0];
  v.codes.resize(static_cast<size_t>(v.frames * v.num_codebooks));
  const uint64_t begin = h.data_start + t.begin;
  if (begin + v.codes.size() * sizeof(int32_t) > bytes.size())
    throw Error(label + ": tensor 'codes' runs past the end of the file.");
  std::memcpy(v.codes.data(), bytes.data() + begin, v.codes.size() * sizeof(int32_t));
  for (size_t i = 0; i < v.codes.size(); ++i)
    if (v.codes[i] < 0)
      throw Error(label + ": code " + std::to_string(v.codes[i]) + " at frame " +
                  std::to_string(i / v.num_codebooks) + " is negative.");
  return v;
}

std::vector<uint8_t> serialize(const Voice& v, const char* format) {
  if (v.frames < 1 || v.num_codebooks < 1 ||
      static_cast<int64_t>(v.codes.size()) != v.frames * v.num_codebooks)
    throw Error("voice writer: codes do not match frames x num_codebooks.");
  SafetensorsWriter w;
  w.add_typed<int32_t>("codes", DType::I32, {v.frames, v.num_codebooks}, v.codes);
  w.set_metadata("format", format);
  if (std::strcmp(format, kVoiceFormat) == 0) w.set_metadata("transcript", v.transcript);
  w.set_metadata("sample_rate", std::to_string(v.sample_rate));
  w.set_metadata("frame_rate", format_double(v.frame_rate));
  w.set_metadata("num_codebooks", std::to_string(v.num_codebooks));
  w.set_metadata("codec_sha256", v.codec_sha256);
  return w.serialize();
}

std::vector<uint8_t> read_all(const std::filesystem::path& path) {
  try {
    return read_file(path);
  } catch (const Error&) {
    throw Error(path.string() + ": cannot read the file.");
  }
}

}  // namespace

bool is_valid_voice_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Voice parse_voice(const std::vector<uint8_t>& bytes, const std::string& label) {
  return parse(bytes, label, kVoiceFormat);
}

Voice read_voice(const std::filesystem::path& path) {
  return parse(read_all(path), path.string(), kVoiceFormat);
}

std::vector<uint8_t> serialize_voice(const Voice& voice) {
  if (voice.transcript.empty()) throw Error("voice writer: the transcript is empty.");
  return serialize(voice, kVoiceFormat);
}

void write_voice(const std::filesystem::path& path, const Voice& voice) {
  write_file_atomic(path, serialize_voice(voice));
}

Voice read_codes(const std::filesystem::path& path) {
  return parse(read_all(path), path.string(), kCodesFormat);
}

Voice parse_codes(const std::vector<uint8_t>& bytes, const std::string& label) {
  return parse(bytes, label, kCodesFormat);
}

std::vector<uint8_t> serialize_codes(const Voice& codes) {
  return serialize(codes, kCodesFormat);
}

void write_codes(const std::filesystem::path& path, const Voice& codes) {
  write_file_atomic(path, serialize_codes(codes));
}

}  // namespace drama

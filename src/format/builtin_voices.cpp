// Built-in voices of a checkpoint: loading them verified against the checkpoint's manifest, and
// adding one with the manifest re-pinned (docs/checkpoints.md, "Built-in voices").
#include "format/builtin_voices.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "format/config.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxNameCodePoints = 256;

// What a built-in voice must agree with: the checkpoint's audio settings and its codec.
struct Fit {
  int64_t num_codebooks = 0, codebook_size = 0, sample_rate = 0;
  double frame_rate = 0;
  std::string codec_sha256;
};

std::string where_of(const fs::path& dir) {
  return "checkpoint " + dir.string();
}

std::string voices_path(const std::string& file) {
  return std::string(kBuiltinVoicesDir) + "/" + file;
}

const ManifestFile* listed(const Manifest& m, const std::string& path) {
  for (const auto& f : m.files)
    if (f.path == path) return &f;
  return nullptr;
}

// The bytes of DIR/rel, read once and checked against the manifest before anyone parses them.
std::vector<uint8_t> read_verified(const fs::path& dir, const Manifest& m, const std::string& rel) {
  const std::string where = where_of(dir);
  const ManifestFile* f = listed(m, rel);
  if (!f)
    throw Error(where + ": " + rel + " is not listed in manifest '" + m.name +
                "' (every file under voices/ must be; `drama voice write --into` adds a voice and "
                "re-pins the manifest)");
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file(dir / rel);
  } catch (const Error&) {
    throw Error(where + ": " + rel + " cannot be read");
  }
  if (bytes.size() != f->size)
    throw Error(where + ": " + rel + ": size " + std::to_string(bytes.size()) +
                " != " + std::to_string(f->size) + " (manifest '" + m.name + "')");
  if (sha256_hex(bytes) != f->sha256)
    throw Error(where + ": " + rel + ": sha256 mismatch with manifest '" + m.name + "'");
  return bytes;
}

Fit checkpoint_fit(const fs::path& dir, const Manifest& m) {
  const std::vector<uint8_t> bytes = read_verified(dir, m, "config.json");
  const json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) throw Error(where_of(dir) + ": config.json is not valid JSON");
  const Drama3Config c = parse_drama3_config(j, (dir / "config.json").string());
  const ManifestFile* codec = listed(m, "codec/model.safetensors");
  if (!codec)
    throw Error(where_of(dir) + ": manifest '" + m.name +
                "' lists no codec/model.safetensors, so built-in voices cannot be checked "
                "against the codec");
  return {c.audio.num_codebooks, c.audio.codebook_size, c.audio.sample_rate, c.audio.frame_rate,
          codec->sha256};
}

void check_fit(const Voice& v, const Fit& fit, const std::string& label) {
  if (v.num_codebooks != fit.num_codebooks)
    throw Error(label + " has " + std::to_string(v.num_codebooks) + " codebooks; the model uses " +
                std::to_string(fit.num_codebooks));
  if (v.codec_sha256 != fit.codec_sha256)
    throw Error(label + " was encoded with codec " + v.codec_sha256 +
                ", not this checkpoint's codec/model.safetensors (" + fit.codec_sha256 + ")");
  if (v.sample_rate != fit.sample_rate || v.frame_rate != fit.frame_rate)
    throw Error(label + ": its sample rate or frame rate differs from the model's audio settings");
  for (size_t i = 0; i < v.codes.size(); ++i)
    if (v.codes[i] >= fit.codebook_size)
      throw Error(label + ": code " + std::to_string(v.codes[i]) + " at frame " +
                  std::to_string(i / size_t(v.num_codebooks)) + " is outside the codebook (size " +
                  std::to_string(fit.codebook_size) + ")");
}

// Why `name` is not a usable display name (1 to 256 code points of UTF-8), or empty.
std::string bad_name_reason(const std::string& name) {
  try {
    (void)json(name).dump();  // nlohmann refuses invalid UTF-8 here
  } catch (const json::exception&) {
    return "is not valid UTF-8";
  }
  size_t n = 0;
  for (unsigned char c : name) n += (c & 0xC0) != 0x80;
  if (n == 0 || n > kMaxNameCodePoints) return "must be 1 to 256 characters";
  return {};
}

// voices/<id>.json: {"name": string, "created": integer >= 0 (optional)}; nothing else.
void parse_sidecar(const std::vector<uint8_t>& bytes, const std::string& label, BuiltinVoice& v) {
  const json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error(label + ": must be a JSON object {\"name\", \"created\"}");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "name" && it.key() != "created")
      throw Error(label + ": unknown key '" + it.key() + "'");
  if (!j.contains("name") || !j["name"].is_string())
    throw Error(label + ": 'name' must be a string");
  v.name = j["name"].get<std::string>();
  if (const std::string why = bad_name_reason(v.name); !why.empty())
    throw Error(label + ": 'name' " + why);
  if (j.contains("created")) {
    const json& c = j["created"];
    if (!c.is_number_integer() || (!c.is_number_unsigned() && c.get<int64_t>() < 0))
      throw Error(label + ": 'created' must be a non-negative integer (unix seconds)");
    v.created = c.get<int64_t>();
  }
}

// The ids present under DIR/voices and which of their two files exist (1: .voice, 2: .json).
std::map<std::string, int> scan_voices_dir(const fs::path& dir) {
  const std::string where = where_of(dir);
  const fs::path vdir = dir / kBuiltinVoicesDir;
  std::map<std::string, int> ids;
  std::error_code ec;
  const fs::file_status st = fs::status(vdir, ec);
  if (!fs::exists(st)) return ids;
  if (!fs::is_directory(st)) throw Error(where + ": voices exists but is not a directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(vdir, ec)) names.push_back(e.path().filename());
  if (ec) throw Error(where + ": cannot list voices/: " + ec.message());
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    const fs::path p = vdir / name;
    const std::string ext = p.extension().string();
    const std::string stem = p.stem().string();
    const int bit = ext == ".voice" ? 1 : ext == ".json" ? 2 : 0;
    if (bit == 0 || !is_valid_voice_id(stem) || !fs::is_regular_file(p, ec))
      throw Error(where + ": " + voices_path(name) +
                  " does not belong in voices/ (only <id>.voice and <id>.json files, id "
                  "[A-Za-z0-9_-]{1,64})");
    ids[stem] |= bit;
  }
  return ids;
}

}  // namespace

std::vector<BuiltinVoice> load_builtin_voices(const fs::path& dir, const Manifest& manifest) {
  const std::string where = where_of(dir);
  const std::map<std::string, int> ids = scan_voices_dir(dir);
  // A listed voice file that is gone is as wrong as an unlisted one that is there.
  const std::string prefix = voices_path("");
  for (const auto& f : manifest.files) {
    if (f.path.rfind(prefix, 0) != 0) continue;
    const fs::path p(f.path);
    const std::string stem = p.stem().string();
    const int bit = p.extension() == ".voice" ? 1 : p.extension() == ".json" ? 2 : 0;
    auto it = ids.find(stem);
    if (bit == 0 || it == ids.end() || !(it->second & bit) || p.parent_path() != kBuiltinVoicesDir)
      throw Error(where + ": " + f.path + " is listed in manifest '" + manifest.name +
                  "' but is not a built-in voice file present under voices/");
  }
  std::vector<BuiltinVoice> out;
  if (ids.empty()) return out;
  const Fit fit = checkpoint_fit(dir, manifest);
  for (const auto& [id, bits] : ids) {
    if (bits != 3)
      throw Error(where + ": built-in voice '" + id + "' needs both " + voices_path(id + ".voice") +
                  " and " + voices_path(id + ".json") + "; only " +
                  voices_path(id + (bits == 1 ? ".voice" : ".json")) + " is there");
    BuiltinVoice v;
    v.id = id;
    const std::string side = voices_path(id + ".json"), file = voices_path(id + ".voice");
    parse_sidecar(read_verified(dir, manifest, side), where + ": " + side, v);
    Voice voice = parse_voice(read_verified(dir, manifest, file), where + ": " + file);
    check_fit(voice, fit, where + ": " + file);
    v.voice = std::make_shared<const Voice>(std::move(voice));
    out.push_back(std::move(v));
  }
  return out;
}

void check_builtin_id_free(const fs::path& dir, const std::string& id) {
  if (!is_valid_voice_id(id))
    throw UsageError("voice id '" + id + "' must be 1 to 64 characters from [A-Za-z0-9_-]");
  std::error_code ec;
  for (const char* ext : {".voice", ".json"})
    if (fs::exists(fs::symlink_status(dir / kBuiltinVoicesDir / (id + ext), ec)))
      throw Error(where_of(dir) + ": built-in voice '" + id + "' already exists (" +
                  voices_path(id + ext) + ")");
}

Manifest add_builtin_voice(const fs::path& dir, const Manifest& verified,
                           const NewBuiltinVoice& nv) {
  const std::string where = where_of(dir);
  check_builtin_id_free(dir, nv.id);
  const std::string name = nv.name.empty() ? nv.id : nv.name;
  if (const std::string why = bad_name_reason(name); !why.empty())
    throw UsageError("voice name " + why);
  if (nv.created < 0) throw UsageError("created must be 0 or more (unix seconds)");
  if (verified.revision != content_revision(verified.files))
    throw Error(where + ": manifest '" + verified.name + "' has revision " + verified.revision +
                " of " + verified.repo +
                ", not the content-derived revision of its files: it names a commit that a new "
                "voice would not be in. Voices are added to checkpoints drama wrote "
                "(make-checkpoint, quantize, voice write --into), whose revision follows their "
                "content");
  const fs::path manifest_path = dir / "manifest.json";
  if (manifest_to_json(load_manifest(manifest_path)) != manifest_to_json(verified))
    throw Error(where + ": " + manifest_path.string() +
                " is not the manifest the checkpoint was verified against (verify it against "
                "its own manifest.json)");
  const std::vector<BuiltinVoice> existing = load_builtin_voices(dir, verified);
  const std::string file = voices_path(nv.id + ".voice"), side = voices_path(nv.id + ".json");
  for (const auto& v : existing)
    if (v.id == nv.id)
      throw Error(where + ": built-in voice '" + nv.id + "' already exists (" + file + ")");
  const Fit fit = checkpoint_fit(dir, verified);
  check_fit(nv.voice, fit, "voice '" + nv.id + "'");

  const fs::path vdir = dir / kBuiltinVoicesDir;
  std::error_code ec;
  const bool made_dir = !fs::exists(vdir, ec);
  if (made_dir && !fs::create_directory(vdir, ec))
    throw Error(where + ": cannot create voices/: " + ec.message());
  try {
    // Sorted keys and no clock unless asked: the same voice gives the same bytes.
    write_text_file_atomic(dir / side,
                           json{{"name", name}, {"created", nv.created}}.dump(2) + "\n");
    write_voice(dir / file, nv.voice);
    Manifest m = verified;
    const Manifest added =
        compute_manifest(dir, {side, file}, m.name, m.weights, m.repo, std::string(40, '0'));
    m.files.insert(m.files.end(), added.files.begin(), added.files.end());
    std::sort(m.files.begin(), m.files.end(),
              [](const ManifestFile& a, const ManifestFile& b) { return a.path < b.path; });
    m.revision = content_revision(m.files);
    m = parse_manifest(manifest_to_json(m), "re-pinned for " + dir.string());
    load_builtin_voices(dir, m);  // what is about to be pinned loads, before it is pinned
    write_manifest(manifest_path, m);
    return m;
  } catch (...) {
    fs::remove(dir / file, ec);
    fs::remove(dir / side, ec);
    if (made_dir) fs::remove(vdir, ec);
    throw;
  }
}

}  // namespace drama

#include "audio/audio_io.h"

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "audio/encode_stream.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {

namespace {

// A libsndfile virtual file over memory: reads from `data`, or writes into `out` (growable).
struct MemoryFile {
  const uint8_t* data = nullptr;
  sf_count_t size = 0;
  sf_count_t pos = 0;
  std::vector<uint8_t>* out = nullptr;
};

sf_count_t vio_length(void* user) {
  return static_cast<MemoryFile*>(user)->size;
}

sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  sf_count_t base = whence == SEEK_CUR ? f->pos : whence == SEEK_END ? f->size : 0;
  const sf_count_t target = base + offset;
  if (target < 0) return -1;
  f->pos = target;
  return f->pos;
}

sf_count_t vio_read(void* ptr, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  if (f->pos >= f->size || count <= 0) return 0;
  const sf_count_t n = std::min(count, f->size - f->pos);
  std::memcpy(ptr, f->data + f->pos, static_cast<size_t>(n));
  f->pos += n;
  return n;
}

sf_count_t vio_write(const void* ptr, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  if (!f->out || count < 0) return 0;
  const size_t end = static_cast<size_t>(f->pos + count);
  if (f->out->size() < end) f->out->resize(end);
  std::memcpy(f->out->data() + f->pos, ptr, static_cast<size_t>(count));
  f->pos += count;
  f->size = std::max<sf_count_t>(f->size, f->pos);
  f->data = f->out->data();
  return count;
}

sf_count_t vio_tell(void* user) {
  return static_cast<MemoryFile*>(user)->pos;
}

SF_VIRTUAL_IO virtual_io() {
  SF_VIRTUAL_IO io{};
  io.get_filelen = vio_length;
  io.seek = vio_seek;
  io.read = vio_read;
  io.write = vio_write;
  io.tell = vio_tell;
  return io;
}

// libsndfile reads a WAV whose data chunk is cut short without an error: it logs
// "data : N (should be M)" and serves the frames that exist. Such a file is truncated unless the
// declared size is a streaming placeholder (0xFFFFFFFF or 0: length unknown when written).
bool wav_data_truncated(SNDFILE* sf) {
  std::vector<char> log(16384, 0);
  sf_command(sf, SFC_GET_LOG_INFO, log.data(), static_cast<int>(log.size() - 1));
  const std::string text(log.data());
  size_t at = 0;
  while ((at = text.find("data : ", at)) != std::string::npos) {
    const size_t eol = text.find('\n', at);
    const std::string line = text.substr(at, eol == std::string::npos ? eol : eol - at);
    at += 7;
    if (line.find("(should be") == std::string::npos) continue;
    const unsigned long long declared = std::strtoull(line.c_str() + 7, nullptr, 10);
    if (declared != 0xFFFFFFFFull && declared != 0) return true;
  }
  return false;
}

constexpr int64_t kMaxChannels = 64;
constexpr int64_t kMaxRate = 768000;
// Input audio is a reference voice or a file to encode: at most ten minutes, and at most 2^26
// interleaved samples (256 MiB as float) whatever the rate and channel count.
constexpr int64_t kMaxSeconds = 600;
constexpr int64_t kMaxSamples = int64_t{1} << 26;
// Frames decoded per read: memory grows with the samples the file really holds, never with what
// its header claims (a FLAC header can declare 2^36 samples in 34 bytes).
constexpr sf_count_t kReadChunkFrames = 65536;

}  // namespace

DecodedAudio read_audio_memory(std::span<const uint8_t> bytes, const std::string& label) {
  if (bytes.empty()) throw Error(label + ": the file is empty, not audio.");
  // Audio inputs are WAV or FLAC (interfaces.md). The container is checked before libsndfile sees
  // the bytes, so none of its other parsers (MP3, Ogg, AIFF, ...) ever runs on untrusted input.
  const auto starts = [&](size_t at, const char* magic) {
    const size_t n = std::strlen(magic);
    return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
  };
  const bool riff =
      (starts(0, "RIFF") || starts(0, "RIFX") || starts(0, "RF64")) && starts(8, "WAVE");
  if (!riff && !starts(0, "fLaC"))
    throw Error(label + ": not a WAV or FLAC file (audio inputs are WAV or FLAC).");
  MemoryFile file;
  file.data = bytes.data();
  file.size = static_cast<sf_count_t>(bytes.size());
  SF_VIRTUAL_IO io = virtual_io();
  SF_INFO info{};
  SNDFILE* sf = sf_open_virtual(&io, SFM_READ, &info, &file);
  if (!sf)
    throw Error(label + ": not a readable WAV/FLAC audio file (" +
                std::string(sf_strerror(nullptr)) + ").");
  struct Closer {
    SNDFILE* s;
    ~Closer() { sf_close(s); }
  } closer{sf};
  const int major = info.format & SF_FORMAT_TYPEMASK;
  if (major != SF_FORMAT_WAV && major != SF_FORMAT_WAVEX && major != SF_FORMAT_RF64 &&
      major != SF_FORMAT_FLAC)
    throw Error(label + ": not a WAV or FLAC file (audio inputs are WAV or FLAC).");
  if (info.channels < 1 || info.channels > kMaxChannels)
    throw Error(label + ": unsupported channel count " + std::to_string(info.channels) + ".");
  if (info.samplerate < 1 || info.samplerate > kMaxRate)
    throw Error(label + ": unsupported sample rate " + std::to_string(info.samplerate) + ".");
  if (info.frames < 0 || info.frames > kMaxSeconds * info.samplerate ||
      info.frames > kMaxSamples / info.channels)
    throw Error(label + ": the audio is too long (" + std::to_string(info.frames) + " frames at " +
                std::to_string(info.samplerate) + " Hz, " + std::to_string(info.channels) +
                " channels; the limit is " + std::to_string(kMaxSeconds) + " s and " +
                std::to_string(kMaxSamples) + " samples).");
  if (wav_data_truncated(sf))
    throw Error(label +
                ": the audio data is truncated (the file is shorter than its header says).");
  DecodedAudio out;
  out.sample_rate = info.samplerate;
  out.channels = info.channels;
  std::vector<float> interleaved;
  sf_count_t got = 0;
  while (got < info.frames) {
    const sf_count_t want = std::min(kReadChunkFrames, info.frames - got);
    interleaved.resize(static_cast<size_t>((got + want) * info.channels));
    const sf_count_t n = sf_readf_float(sf, interleaved.data() + got * info.channels, want);
    if (n <= 0) break;
    got += n;
  }
  // A header that promises more frames than the file holds means the file was cut short.
  if (got != info.frames)
    throw Error(label + ": the audio data is truncated (" + std::to_string(got) + " of " +
                std::to_string(info.frames) + " frames).");
  out.mono.resize(static_cast<size_t>(info.frames));
  const float inv = 1.0f / static_cast<float>(info.channels);
  for (sf_count_t f = 0; f < info.frames; ++f) {
    float sum = 0.0f;
    for (int c = 0; c < info.channels; ++c) sum += interleaved[f * info.channels + c];
    out.mono[f] = info.channels == 1 ? sum : sum * inv;
  }
  for (float v : out.mono)
    if (!std::isfinite(v)) throw Error(label + ": the audio holds non-finite samples.");
  return out;
}

DecodedAudio read_audio_file(const std::filesystem::path& path) {
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file(path);
  } catch (const Error&) {
    throw Error(path.string() + ": cannot read the audio file.");
  }
  return read_audio_memory(bytes, path.string());
}

std::vector<float> resample_audio(std::span<const float> x, int64_t from_rate, int64_t to_rate) {
  if (from_rate == to_rate) return {x.begin(), x.end()};
  if (from_rate <= 0 || to_rate <= 0) throw Error("resample: sample rates must be positive.");
  const size_t out_len =
      static_cast<size_t>((static_cast<int64_t>(x.size()) * to_rate + from_rate - 1) / from_rate);
  std::vector<float> out(out_len + 16);
  soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  soxr_runtime_spec_t runtime = soxr_runtime_spec(1);  // one thread: repeatable results
  size_t done_in = 0, done_out = 0;
  soxr_error_t err =
      soxr_oneshot(static_cast<double>(from_rate), static_cast<double>(to_rate), 1, x.data(),
                   x.size(), &done_in, out.data(), out.size(), &done_out, &io, &quality, &runtime);
  if (err) throw Error(std::string("resample: libsoxr failed (") + err + ").");
  out.resize(std::min(done_out, out_len));
  return out;
}

AudioFormat audio_format_from_name(const std::string& name, const std::string& what) {
  if (name == "wav") return AudioFormat::Wav;
  if (name == "flac") return AudioFormat::Flac;
  if (name == "pcm" || name == "raw") return AudioFormat::Pcm;
  if (name == "mp3") return AudioFormat::Mp3;
  if (name == "opus") return AudioFormat::Opus;
  throw UsageError(what + " must be wav, flac, pcm, mp3 or opus, not '" + name + "'.");
}

AudioFormat audio_format_from_path(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  if (!ext.empty()) ext.erase(0, 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (ext.empty())
    throw UsageError(path.string() +
                     ": no file extension; name it .wav, .flac, .pcm, .mp3 or .opus, or pass "
                     "--format.");
  return audio_format_from_name(ext, path.string() + ": the extension");
}

const char* audio_content_type(AudioFormat format) {
  switch (format) {
    case AudioFormat::Wav:
      return "audio/wav";
    case AudioFormat::Flac:
      return "audio/flac";
    case AudioFormat::Pcm:
      return "audio/pcm";
    case AudioFormat::Mp3:
      return "audio/mpeg";
    case AudioFormat::Opus:
      return "audio/ogg";
  }
  return "application/octet-stream";
}

int16_t float_to_s16(float x) {
  if (std::isnan(x)) return 0;
  const float scaled = std::clamp(x * 32767.0f, -32768.0f, 32767.0f);
  return static_cast<int16_t>(std::lrint(scaled));
}

void append_s16le(std::span<const float> pcm, std::vector<uint8_t>& out) {
  const size_t base = out.size();
  out.resize(base + pcm.size() * 2);
  for (size_t i = 0; i < pcm.size(); ++i) {
    const uint16_t v = static_cast<uint16_t>(float_to_s16(pcm[i]));
    out[base + 2 * i] = static_cast<uint8_t>(v & 0xff);
    out[base + 2 * i + 1] = static_cast<uint8_t>(v >> 8);
  }
}

std::vector<uint8_t> wav_header(int64_t sample_rate, int64_t samples) {
  const bool streaming = samples < 0;
  const uint64_t data_bytes = streaming ? 0 : static_cast<uint64_t>(samples) * 2;
  if (!streaming && data_bytes > 0xFFFFFFFFull - 36)
    throw Error("WAV output: the audio is too long for a WAV file.");
  std::vector<uint8_t> h(44, 0);
  auto u32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) h[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  auto u16 = [&](size_t at, uint16_t v) {
    h[at] = static_cast<uint8_t>(v & 0xff);
    h[at + 1] = static_cast<uint8_t>(v >> 8);
  };
  auto tag = [&](size_t at, const char* t) {
    for (int i = 0; i < 4; ++i) h[at + i] = static_cast<uint8_t>(t[i]);
  };
  tag(0, "RIFF");
  u32(4, streaming ? 0xFFFFFFFFu : static_cast<uint32_t>(36 + data_bytes));
  tag(8, "WAVE");
  tag(12, "fmt ");
  u32(16, 16);
  u16(20, 1);  // PCM
  u16(22, 1);  // mono
  u32(24, static_cast<uint32_t>(sample_rate));
  u32(28, static_cast<uint32_t>(sample_rate * 2));  // byte rate
  u16(32, 2);                                       // block align
  u16(34, 16);                                      // bits per sample
  tag(36, "data");
  u32(40, streaming ? 0xFFFFFFFFu : static_cast<uint32_t>(data_bytes));
  return h;
}

std::vector<uint8_t> encode_audio(std::span<const float> pcm, int64_t sample_rate,
                                  AudioFormat format) {
  std::vector<uint8_t> out;
  if (format == AudioFormat::Pcm) {
    append_s16le(pcm, out);
    return out;
  }
  if (format == AudioFormat::Wav) {
    out = wav_header(sample_rate, static_cast<int64_t>(pcm.size()));
    append_s16le(pcm, out);
    return out;
  }
  if (format == AudioFormat::Mp3 || format == AudioFormat::Opus) {
    auto encoder = make_stream_encoder(format, sample_rate);
    encoder->push(pcm, out);
    encoder->finish(out);
    return out;
  }
  // FLAC through libsndfile, fed the same 16-bit samples as WAV.
  std::vector<short> s16(pcm.size());
  for (size_t i = 0; i < pcm.size(); ++i) s16[i] = float_to_s16(pcm[i]);
  MemoryFile file;
  file.out = &out;
  SF_VIRTUAL_IO io = virtual_io();
  SF_INFO info{};
  info.samplerate = static_cast<int>(sample_rate);
  info.channels = 1;
  info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  SNDFILE* sf = sf_open_virtual(&io, SFM_WRITE, &info, &file);
  if (!sf)
    throw Error(std::string("FLAC output: libsndfile refused (") + sf_strerror(nullptr) + ").");
  const sf_count_t wrote = sf_write_short(sf, s16.data(), static_cast<sf_count_t>(s16.size()));
  sf_close(sf);
  if (wrote != static_cast<sf_count_t>(s16.size())) throw Error("FLAC output: short write.");
  out.resize(static_cast<size_t>(file.size));
  return out;
}

void write_audio_file(const std::filesystem::path& path, std::span<const float> pcm,
                      int64_t sample_rate, AudioFormat format) {
  write_file_atomic(path, encode_audio(pcm, sample_rate, format));
}

}  // namespace drama

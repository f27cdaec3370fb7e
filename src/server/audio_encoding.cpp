#include "server/audio_encoding.h"

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace drama::server {

namespace {

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += char((v >> (8 * i)) & 0xFF);
}
void put_u16(std::string& s, uint16_t v) {
  s += char(v & 0xFF);
  s += char(v >> 8);
}

// libsndfile virtual I/O over an in-memory buffer (read or write).
struct MemoryFile {
  std::string data;
  sf_count_t pos = 0;
};

sf_count_t vio_length(void* user) {
  return sf_count_t(static_cast<MemoryFile*>(user)->data.size());
}
sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  sf_count_t base = whence == SEEK_SET   ? 0
                    : whence == SEEK_CUR ? f->pos
                                         : sf_count_t(f->data.size());
  sf_count_t p = base + offset;
  if (p < 0) return -1;
  f->pos = p;
  return p;
}
sf_count_t vio_read(void* ptr, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  sf_count_t avail = std::max<sf_count_t>(0, sf_count_t(f->data.size()) - f->pos);
  sf_count_t n = std::min(count, avail);
  if (n > 0) std::memcpy(ptr, f->data.data() + f->pos, size_t(n));
  f->pos += n;
  return n;
}
sf_count_t vio_write(const void* ptr, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  size_t end = size_t(f->pos + count);
  if (end > f->data.size()) f->data.resize(end);
  std::memcpy(f->data.data() + f->pos, ptr, size_t(count));
  f->pos += count;
  return count;
}
sf_count_t vio_tell(void* user) {
  return static_cast<MemoryFile*>(user)->pos;
}

SF_VIRTUAL_IO memory_io() {
  return {vio_length, vio_seek, vio_read, vio_write, vio_tell};
}

}  // namespace

void append_s16le(std::span<const float> pcm, std::string& out) {
  size_t at = out.size();
  out.resize(at + pcm.size() * 2);
  for (size_t i = 0; i < pcm.size(); ++i) {
    // Same arithmetic as src/audio's float_to_s16 (float multiply, NaN -> 0) so `say` and the
    // server write identical samples.
    float x = pcm[i];
    auto v = std::isnan(x) ? int16_t(0)
                           : int16_t(std::lrint(std::clamp(x * 32767.0f, -32768.0f, 32767.0f)));
    auto u = uint16_t(v);
    out[at + 2 * i] = char(u & 0xFF);
    out[at + 2 * i + 1] = char(u >> 8);
  }
}

std::string wav_header(int64_t sample_rate, uint32_t data_bytes) {
  std::string h;
  h.reserve(44);
  h += "RIFF";
  put_u32(h, data_bytes == kUnknownWavSize ? kUnknownWavSize : data_bytes + 36);
  h += "WAVEfmt ";
  put_u32(h, 16);
  put_u16(h, 1);  // PCM
  put_u16(h, 1);  // mono
  put_u32(h, uint32_t(sample_rate));
  put_u32(h, uint32_t(sample_rate * 2));
  put_u16(h, 2);
  put_u16(h, 16);
  h += "data";
  put_u32(h, data_bytes);
  return h;
}

std::string encode_flac(std::span<const float> pcm, int64_t sample_rate) {
  MemoryFile file;
  SF_VIRTUAL_IO io = memory_io();
  SF_INFO info{};
  info.samplerate = int(sample_rate);
  info.channels = 1;
  info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  SNDFILE* sf = sf_open_virtual(&io, SFM_WRITE, &info, &file);
  if (!sf) throw Error(std::string("FLAC encoder: ") + sf_strerror(nullptr));
  // Same s16 values as the WAV/PCM replies, so every format carries identical samples.
  std::string s16;
  append_s16le(pcm, s16);
  std::vector<short> samples(pcm.size());
  std::memcpy(samples.data(), s16.data(), s16.size());
  sf_count_t written = sf_write_short(sf, samples.data(), sf_count_t(samples.size()));
  sf_close(sf);
  if (written != sf_count_t(samples.size())) throw Error("FLAC encoder: short write");
  return std::move(file.data);
}

std::vector<float> decode_audio(std::span<const uint8_t> bytes, int64_t target_rate,
                                const std::string& label) {
  MemoryFile file;
  file.data.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  SF_VIRTUAL_IO io = memory_io();
  SF_INFO info{};
  SNDFILE* sf = sf_open_virtual(&io, SFM_READ, &info, &file);
  if (!sf) throw Error(label + " is not readable WAV or FLAC audio");
  int major = info.format & SF_FORMAT_TYPEMASK;
  if ((major != SF_FORMAT_WAV && major != SF_FORMAT_WAVEX && major != SF_FORMAT_FLAC) ||
      info.channels < 1 || info.samplerate < 1000 || info.frames <= 0) {
    sf_close(sf);
    throw Error(label + " must be non-empty WAV or FLAC audio");
  }
  std::vector<float> interleaved(size_t(info.frames) * size_t(info.channels));
  sf_count_t got = sf_readf_float(sf, interleaved.data(), info.frames);
  sf_close(sf);
  if (got <= 0) throw Error(label + " has no readable samples");
  std::vector<float> mono(static_cast<size_t>(got));
  for (size_t i = 0; i < mono.size(); ++i) {
    double sum = 0;
    for (int c = 0; c < info.channels; ++c)
      sum += interleaved[i * size_t(info.channels) + size_t(c)];
    mono[i] = float(sum / info.channels);
  }
  if (info.samplerate == target_rate) return mono;
  size_t out_len = size_t(std::ceil(double(mono.size()) * double(target_rate) / info.samplerate));
  std::vector<float> out(out_len + 16);
  size_t done = 0;
  soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  soxr_error_t err =
      soxr_oneshot(double(info.samplerate), double(target_rate), 1, mono.data(), mono.size(),
                   nullptr, out.data(), out.size(), &done, nullptr, &q, nullptr);
  if (err) throw Error(label + ": resampling failed: " + err);
  out.resize(done);
  return out;
}

}  // namespace drama::server

// Decodes audio that drama wrote (MP3, Ogg Opus, FLAC, WAV) with any libsndfile decoder, for
// tests only: the library's readers accept WAV and FLAC alone (audio inputs are untrusted).
#pragma once

#include <sndfile.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "audio/audio_io.h"

namespace drama::testing {

inline DecodedAudio decode_output(const std::string& bytes) {
  struct Mem {
    const std::string* b;
    sf_count_t at = 0;
  } mem{&bytes};
  SF_VIRTUAL_IO io{};
  io.get_filelen = [](void* u) { return sf_count_t(static_cast<Mem*>(u)->b->size()); };
  io.seek = [](sf_count_t off, int whence, void* u) {
    auto* m = static_cast<Mem*>(u);
    const sf_count_t size = sf_count_t(m->b->size());
    m->at = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->at + off : size + off;
    m->at = std::max<sf_count_t>(0, std::min(m->at, size));
    return m->at;
  };
  io.read = [](void* p, sf_count_t n, void* u) {
    auto* m = static_cast<Mem*>(u);
    const sf_count_t left = sf_count_t(m->b->size()) - m->at;
    const sf_count_t k = std::min(n, left);
    std::memcpy(p, m->b->data() + m->at, size_t(k));
    m->at += k;
    return k;
  };
  io.write = [](const void*, sf_count_t, void*) { return sf_count_t(0); };
  io.tell = [](void* u) { return static_cast<Mem*>(u)->at; };
  SF_INFO info{};
  SNDFILE* sf = sf_open_virtual(&io, SFM_READ, &info, &mem);
  if (!sf) throw std::runtime_error(std::string("libsndfile: ") + sf_strerror(nullptr));
  std::vector<float> x;
  std::vector<float> buf(4096 * size_t(info.channels));
  for (;;) {
    const sf_count_t n = sf_readf_float(sf, buf.data(), 4096);
    if (n <= 0) break;
    for (sf_count_t f = 0; f < n; ++f) {
      float s = 0;
      for (int c = 0; c < info.channels; ++c) s += buf[size_t(f * info.channels + c)];
      x.push_back(s / float(info.channels));
    }
  }
  sf_close(sf);
  DecodedAudio d;
  d.mono = std::move(x);
  d.sample_rate = info.samplerate;
  d.channels = info.channels;
  return d;
}

}  // namespace drama::testing

// libFuzzer target: every audio input path (libsndfile from memory through sf_open_virtual,
// downmix, resampling to the codec rate) on arbitrary bytes must return finite mono samples or
// throw drama::Error; nothing else. Seeds: fuzz/seeds/fuzz_audio/ (tiny WAV and FLAC files).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "audio/audio_io.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const drama::DecodedAudio a = drama::read_audio_memory({data, size}, "fuzz");
    if (a.sample_rate <= 0 || a.channels <= 0) std::abort();
    for (float v : a.mono)
      if (!std::isfinite(v)) std::abort();
    if (a.mono.size() <= 48000) {  // keep each run fast
      const auto y = drama::resample_audio(a.mono, a.sample_rate, 24000);
      if (a.sample_rate == 24000 && y.size() != a.mono.size()) std::abort();
    }
  } catch (const drama::Error&) {
  }
  return 0;
}

// Helpers shared by the codec tests: scratch directories and tiny random codecs.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/mimi_config.h"
#include "format/random_checkpoint.h"
#include "support/scratch_dir.h"

namespace drama::testing {

// The small codec random checkpoints carry (hidden 32, filters 8, 8 quantizers of 64 codes).
inline MimiConfig tiny_codec_config() {
  return small_codec_config(64, 8);
}

inline std::filesystem::path write_tiny_codec(const std::filesystem::path& dir, uint64_t seed,
                                              const MimiConfig& c = tiny_codec_config()) {
  std::filesystem::create_directories(dir);
  write_random_codec(c, seed, dir);
  return dir;
}

inline std::vector<int32_t> random_codes(int64_t frames, int64_t k, int64_t size, uint64_t seed) {
  std::printf("random codes: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> codes(static_cast<size_t>(frames * k));
  for (auto& c : codes) c = static_cast<int32_t>(rng() % static_cast<uint64_t>(size));
  return codes;
}

// Speech-like test signal: a few harmonics with a slow envelope, fixed by the seed.
inline std::vector<float> test_signal(int64_t samples, int64_t rate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double f0 = 100.0 + 100.0 * u(rng);
  std::vector<float> x(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(rate);
    double v = 0;
    for (int h = 1; h <= 5; ++h) v += std::sin(2 * M_PI * f0 * h * t) / h;
    x[i] = static_cast<float>(0.3 * v * (0.6 + 0.4 * std::sin(2 * M_PI * 3.0 * t)) +
                              0.01 * (u(rng) - 0.5));
  }
  return x;
}

}  // namespace drama::testing

// Shared helpers of the CPU backend tests: seeded random inputs, random NVFP4/BF16 weights,
// float64 references and comparison with stated tolerances.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "util/dtype.h"
#include "util/sampling.h"

namespace drama::test {

inline std::vector<cpu::Isa> supported_isas() {
  std::vector<cpu::Isa> out;
  for (auto isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512})
    if (cpu::isa_supported(isa)) out.push_back(isa);
  return out;
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// An NVFP4 weight with random codes and scales in the range a quantizer produces.
struct Nvfp4Weight {
  std::vector<uint8_t> codes, scales;
  LinearWeight view;
  Nvfp4Weight(std::mt19937& rng, int64_t out, int64_t in) {
    codes.resize(out * in / 2);
    scales.resize(out * in / 16);
    std::uniform_int_distribution<int> byte(0, 255), scale(0x20, 0x7e);
    for (auto& c : codes) c = static_cast<uint8_t>(byte(rng));
    for (auto& s : scales) s = static_cast<uint8_t>(scale(rng));
    view = {WeightFormat::NVFP4, out, in, codes.data(), scales.data(), 0.0137f};
  }
  double at(int64_t o, int64_t i) const {
    const uint8_t b = codes[(o * view.in + i) / 2];
    return static_cast<double>(e2m1_to_f32((i & 1) ? b >> 4 : b & 15)) *
           e4m3_to_f32(scales[(o * view.in + i) / 16]) * view.scale2;
  }
};

struct Bf16Weight {
  std::vector<uint16_t> data;
  LinearWeight view;
  Bf16Weight(std::mt19937& rng, int64_t out, int64_t in) {
    for (float f : random_floats(rng, out * in, -0.2f, 0.2f)) data.push_back(f32_to_bf16(f));
    view = {WeightFormat::BF16, out, in, data.data(), nullptr, 1.0f};
  }
  double at(int64_t o, int64_t i) const { return bf16_to_f32(data[o * view.in + i]); }
};

// y = x w^T in float64, and the magnitude sum_i |x w| each element's rounding error scales with.
template <class W>
void reference_linear(const W& w, const std::vector<float>& x, int64_t rows,
                      std::vector<double>& ref, std::vector<double>& mag) {
  const int64_t out = w.view.out, in = w.view.in;
  ref.assign(rows * out, 0.0);
  mag.assign(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const double p = w.at(o, i) * x[r * in + i];
        ref[r * out + o] += p;
        mag[r * out + o] += std::abs(p);
      }
}

inline bool bitwise_equal(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

inline double relative_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(err / norm);
}

}  // namespace drama::test

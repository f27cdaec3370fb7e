#include "contract/registry_util.h"

#include <algorithm>
#include <chrono>

namespace drama::contract {

void Nvfp4Matrix::recompute() {
  w.assign(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const uint8_t byte = codes[o * (in / 2) + i / 2];
      const uint8_t code = (i % 2 == 0) ? (byte & 15) : (byte >> 4);
      w[o * in + i] = double(e2m1_to_f32(code)) *
                      double(e4m3_to_f32(scales[o * (in / 16) + i / 16])) * double(scale2);
    }
}

Nvfp4Matrix random_nvfp4(Rng& rng, int64_t out, int64_t in, bool integral) {
  Nvfp4Matrix m;
  m.out = out;
  m.in = in;
  m.codes.resize(static_cast<size_t>(out * in / 2));
  m.scales.resize(static_cast<size_t>(out * in / 16));
  for (auto& c : m.codes) c = static_cast<uint8_t>(rng.integer(0, 255));
  for (auto& s : m.scales)
    s = integral ? f32_to_e4m3(rng.integer(0, 1) ? 2.0f : 1.0f)
                 : f32_to_e4m3(static_cast<float>(std::exp2(rng.uniform(-2.0, 2.0))));
  m.scale2 = integral ? 1.0f : static_cast<float>(rng.uniform(0.004, 0.02));
  m.recompute();
  return m;
}

Bf16Matrix random_bf16(Rng& rng, int64_t out, int64_t in, double sd, bool integral) {
  Bf16Matrix m;
  m.out = out;
  m.in = in;
  m.data.resize(static_cast<size_t>(out * in));
  m.w.resize(m.data.size());
  for (size_t i = 0; i < m.data.size(); ++i) {
    const float v =
        integral ? static_cast<float>(rng.integer(-8, 8)) : static_cast<float>(rng.normal(0, sd));
    m.data[i] = f32_to_bf16(v);
    m.w[i] = bf16_to_f32(m.data[i]);
  }
  return m;
}

double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace drama::contract

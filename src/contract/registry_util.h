// Helpers shared by the kernel registrations: seeded inputs, precision models for references and
// degraded twins, and error bounds derived from unit roundoff.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "contract/contract.h"
#include "util/dtype.h"

namespace drama::contract {

// Unit roundoff of the types the kernels and twins use.
inline constexpr double kU32 = 0x1.0p-24;  // float32
inline constexpr double kU16 = 0x1.0p-11;  // float16

// gamma_n = n u / (1 - n u): the classic bound on a length-n float32 reduction (Higham 3.1).
inline double gamma32(double n) {
  return n * kU32 / (1.0 - n * kU32);
}

// Rounding of a double through the lower-precision types used by degraded twins.
inline double to_f16(double v) {
  return static_cast<double>(f16_to_f32(f32_to_f16(static_cast<float>(v))));
}
inline double to_bf16(double v) {
  return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(v))));
}

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  double normal(double mean = 0.0, double sd = 1.0) {
    return std::normal_distribution<double>(mean, sd)(gen);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen);
  }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  }
  std::vector<float> normals(size_t n, double mean = 0.0, double sd = 1.0) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(normal(mean, sd));
    return v;
  }
};

template <typename T>
double l2(const std::vector<T>& v) {
  double s = 0;
  for (const T& x : v) {
    const double d = static_cast<double>(x);
    if (std::isfinite(d)) s += d * d;
  }
  return std::sqrt(s);
}

inline std::vector<uint16_t> to_bf16_vec(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// Copies host floats into an output the kernel updates in place (on the CPU, plain copies).
inline void stage(Backend& b, float* dst, const float* src, int64_t n) {
  b.upload(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// The host inputs of one kernel call copied into the backend's memory, so that every backend
// gets the kind of pointer the model passes it (device memory on a GPU, fresh host copies on the
// CPU). Outputs made with `output` are read back into their host buffers by finish(). The
// destructor waits for the backend before freeing anything.
class DeviceCopies {
 public:
  explicit DeviceCopies(Backend& b) : b_(b) {}
  ~DeviceCopies() { b_.synchronize(); }
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;

  template <typename T>
  T* in(const T* host, size_t count) {
    auto buf = b_.alloc(std::max<size_t>(count, 1) * sizeof(T));
    if (count) b_.upload(buf->data(), host, count * sizeof(T));
    buffers_.push_back(std::move(buf));
    return static_cast<T*>(buffers_.back()->data());
  }
  template <typename T>
  T* in(const std::vector<T>& v) {
    return in(v.data(), v.size());
  }
  // A copy of host[0, count) on the backend that finish() copies back into host.
  template <typename T>
  T* output(T* host, size_t count) {
    T* dev = in(static_cast<const T*>(host), count);
    back_.push_back({host, dev, count * sizeof(T)});
    return dev;
  }
  LinearWeight weight(const LinearWeight& host) {
    LinearWeight w = host;
    if (host.format == WeightFormat::NVFP4) {
      w.data = in(static_cast<const uint8_t*>(host.data), size_t(host.out * host.in / 2));
      w.scales = in(host.scales, size_t(host.out * host.in / 16));
    } else {
      w.data = in(static_cast<const uint16_t*>(host.data), size_t(host.out * host.in));
    }
    return w;
  }
  void finish() {
    for (const Back& b : back_) b_.download(b.host, b.dev, b.bytes);
    back_.clear();
  }

 private:
  struct Back {
    void* host;
    const void* dev;
    size_t bytes;
  };
  Backend& b_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::vector<Back> back_;
};

// An NVFP4 weight with its exact dequantized values.
struct Nvfp4Matrix {
  int64_t out = 0, in = 0;
  std::vector<uint8_t> codes;   // [out, in/2]
  std::vector<uint8_t> scales;  // [out, in/16] e4m3
  float scale2 = 1.0f;
  std::vector<double> w;  // dequantized, exact in double
  LinearWeight view() const {
    return {WeightFormat::NVFP4, out, in, codes.data(), scales.data(), scale2};
  }
  void recompute();
};

// Random codes (every E2M1 value, both signs), block scales in [0.25, 4), a per-tensor scale.
// With `integral`, scales are 1 or 2 and scale2 is 1, so products with integer inputs are exact.
Nvfp4Matrix random_nvfp4(Rng& rng, int64_t out, int64_t in, bool integral = false);

// A bf16 weight with exact values.
struct Bf16Matrix {
  int64_t out = 0, in = 0;
  std::vector<uint16_t> data;
  std::vector<double> w;
  LinearWeight view() const { return {WeightFormat::BF16, out, in, data.data(), nullptr, 1.0f}; }
};
Bf16Matrix random_bf16(Rng& rng, int64_t out, int64_t in, double sd, bool integral = false);

// Integer outputs live in their own guarded host buffer (8 guard words each side); entries the
// kernel never wrote come back as NaN.
inline constexpr int32_t kPoison = INT32_MIN;
struct IntOut {
  std::vector<int32_t> buf;
  int64_t n;
  explicit IntOut(int64_t count) : buf(static_cast<size_t>(count + 16), kPoison), n(count) {
    std::fill_n(buf.begin(), 8, -77);
    std::fill_n(buf.end() - 8, 8, -77);
  }
  int32_t* data() { return buf.data() + 8; }
  bool guards_ok() const {
    for (int i = 0; i < 8; ++i)
      if (buf[i] != -77 || buf[buf.size() - 1 - i] != -77) return false;
    return true;
  }
  float at(int64_t i) const {
    const int32_t v = buf[8 + i];
    return v == kPoison ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(v);
  }
};

// Median seconds of `reps` calls of fn after one warm-up.
double median_seconds(int reps, const std::function<void()>& fn);

}  // namespace drama::contract

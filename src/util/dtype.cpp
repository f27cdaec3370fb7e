#include "util/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace drama {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 12> kTypes = {{{DType::BOOL, "BOOL", 1},
                                               {DType::U8, "U8", 1},
                                               {DType::I8, "I8", 1},
                                               {DType::I16, "I16", 2},
                                               {DType::I32, "I32", 4},
                                               {DType::I64, "I64", 8},
                                               {DType::F16, "F16", 2},
                                               {DType::BF16, "BF16", 2},
                                               {DType::F32, "F32", 4},
                                               {DType::F64, "F64", 8},
                                               {DType::F8_E4M3, "F8_E4M3", 1},
                                               {DType::F8_E5M2, "F8_E5M2", 1}}};

// Non-negative finite e4m3 values by code 0..126 (monotone increasing in the code).
std::array<float, 127> make_e4m3_table() {
  std::array<float, 127> t{};
  for (int c = 0; c < 127; ++c) t[c] = e4m3_to_f32(static_cast<uint8_t>(c));
  return t;
}
}  // namespace

std::string_view dtype_name(DType t) {
  return kTypes[static_cast<size_t>(t)].name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kTypes)
    if (i.name == name) return i.type;
  return std::nullopt;
}

size_t dtype_size(DType t) {
  return kTypes[static_cast<size_t>(t)].size;
}

// IEEE half conversions in plain integer code (clang 14 has no _Float16 on x86 without
// AVX512-FP16, and the fuzz build uses clang).
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 31u, man = h & 1023u;
  uint32_t bits;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal, exact
    std::memcpy(&bits, &mag, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (x < 0x38800000u) {                        // below 2^-14: a subnormal half
    float a;
    std::memcpy(&a, &x, 4);
    // a * 2^24 is exact; nearbyint rounds to nearest even. 1024 becomes the smallest normal.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t h = (((x >> 23) - 127 + 15) << 10) | ((x & 0x7fffffu) >> 13);
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may reach infinity: right
  return sign | static_cast<uint16_t>(h);
}

float e4m3_to_f32(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 15, man = v & 7;
  float r;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0)
    r = std::ldexp(static_cast<float>(man) / 8.0f, -6);
  else
    r = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return sign ? -r : r;
}

uint8_t f32_to_e4m3(float f) {
  static const std::array<float, 127> table = make_e4m3_table();
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), 448.0f);
  // First code whose value is >= a; then pick the nearer neighbour, ties to the even code.
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  int hi = static_cast<int>(it - table.begin());
  if (hi == 0) return sign;
  const int lo = hi - 1;
  const float dlo = a - table[lo], dhi = table[hi] - a;
  const int c = (dlo < dhi) ? lo : (dhi < dlo) ? hi : ((lo & 1) ? hi : lo);
  return static_cast<uint8_t>(sign | c);
}

float e5m2_to_f32(uint8_t v) {
  // e5m2 is the top byte of an IEEE half.
  return f16_to_f32(static_cast<uint16_t>(v) << 8);
}

uint8_t f32_to_e2m1(float f) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const uint8_t sign = (f < 0.0f) ? 8 : 0;
  const float a = std::fabs(f);
  if (!(a < 6.0f)) return static_cast<uint8_t>(sign | 7);  // saturate (NaN included)
  int hi = 1;
  while (kMag[hi] < a) ++hi;
  const int lo = hi - 1;
  const float dlo = a - kMag[lo], dhi = kMag[hi] - a;
  const int c = (dlo < dhi) ? lo : (dhi < dlo) ? hi : ((lo & 1) ? hi : lo);
  return static_cast<uint8_t>(sign | c);
}

}  // namespace drama

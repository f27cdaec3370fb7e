// Element types of safetensors files and the scalar conversions between them (spec section 4).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace drama {

enum class DType : uint8_t { BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2 };

// Name as written in safetensors headers ("F8_E4M3", ...), and back. Unknown names give nullopt.
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
size_t dtype_size(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

// float8_e4m3fn: bias 7, no infinities, 0x7f/0xff are NaN, max 448.
float e4m3_to_f32(uint8_t v);
uint8_t f32_to_e4m3(float f);  // round to nearest even, saturating to +-448
// float8_e5m2: bias 15, IEEE-like with infinities.
float e5m2_to_f32(uint8_t v);

// E2M1 (NVFP4 element): bit 3 sign, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
inline float e2m1_to_f32(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = kMag[code & 7];
  return (code & 8) ? -m : m;
}
uint8_t f32_to_e2m1(float f);  // round to nearest even on the E2M1 grid, saturating to +-6

}  // namespace drama

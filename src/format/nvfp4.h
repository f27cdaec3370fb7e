// NVFP4 weight quantization as NVIDIA ModelOpt writes it (spec section 4): E2M1 codes, one E4M3
// scale per block of 16 inputs, one float32 scale per tensor. The scalar reference for tools and
// tests; the engine's kernels expand the codes themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace drama {

inline constexpr int64_t kNvfp4Block = 16;

struct Nvfp4Matrix {
  int64_t out = 0, in = 0;
  std::vector<uint8_t> codes;   // [out, in/2], element 2j in the low nibble
  std::vector<uint8_t> scales;  // e4m3 [out, in/16]
  float scale2 = 1.0f;          // weight_scale_2
};

// weight_scale_2 of a matrix: amax(W) / (6 * 448) (1.0 for an all-zero matrix, so nothing divides
// by zero). Throws drama::Error on NaN or infinity.
float nvfp4_tensor_scale(std::span<const float> w);

// Quantizes a row-major float32 [out, in] matrix (in % 16 == 0). `scale2` overrides the tensor
// scale (gate and up of one expert may share the larger of their two scales, as ModelOpt does).
Nvfp4Matrix nvfp4_quantize(std::span<const float> w, int64_t out, int64_t in,
                           std::optional<float> scale2 = std::nullopt);

// out[o, i] = e2m1(code) * float(scale[o, i/16]) * scale2, for rows [row0, row0 + nrows).
void nvfp4_dequantize(const uint8_t* codes, const uint8_t* scales, float scale2, int64_t in,
                      int64_t row0, int64_t nrows, float* out);

}  // namespace drama

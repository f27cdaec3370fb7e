// Tensor-core pieces shared by the BF16 products (linear.cu) and the NVFP4 expert products
// (moe.cu, version 3): mma.sync m16n8k16 with bfloat16 inputs and float32 accumulation, the exact
// split of a float32 activation into three bfloat16 terms, and E2M1 codes times their block scale
// as bfloat16 (exact).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace drama::cuda {

// d += A B for one m16n8k16 tile: a = the lane's four A words (rows g, g + 8 of k slots 2t, 2t + 1
// and 2t + 8, 2t + 9 in the order mma takes them), b0 / b1 = its two B words.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The bfloat16 pair of the upper halves of two floats (first in the low half), then each float
// minus its upper half (exact). Three calls split x exactly: x = hi + mid + lo (24 significand
// bits in three pieces of at most 8).
__device__ __forceinline__ uint32_t take_upper_halves(float& a, float& b) {
  const uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
  a -= __uint_as_float(ua & 0xffff0000u);
  b -= __uint_as_float(ub & 0xffff0000u);
  return __byte_perm(ua, ub, 0x7632);
}

// Inputs v (four floats) split into their three bfloat16 terms as mma's B words: plane A's words
// returned, {hi(x, y), hi(z, w), mid(x, y), mid(z, w)}, plane B's in b, {lo(x, y), lo(z, w)}. The
// version-3 expert kernels (moe.cu) and the wide BF16 products (linear.cu) split with it, so every
// layout splits an activation with the same operations in the same order.
__device__ __forceinline__ uint4 split_activations(float4 v, uint2& b) {
  uint4 a;
  a.x = take_upper_halves(v.x, v.y);
  a.y = take_upper_halves(v.z, v.w);
  a.z = take_upper_halves(v.x, v.y);
  a.w = take_upper_halves(v.z, v.w);
  b.x = take_upper_halves(v.x, v.y);
  b.y = take_upper_halves(v.z, v.w);
  return a;
}

// An E4M3 block scale as a bfloat16 pair (both halves), exactly (4 significant bits): e4m3_to_f32's
// values without its branches. The magnitude bits moved to a float's exponent and mantissa make
// the value times 2^-120 (subnormal where the E4M3 exponent is 0, as E4M3's own subnormals), and
// the product with 2^120 is exact; NaN (0x7f, 0xff) is e4m3_to_f32's quiet NaN, unsigned.
// (CudaGroupedExperts.E2m1DecodeEqualsTheReference runs every scale through it.)
__device__ __forceinline__ uint32_t e4m3_bf16x2(uint8_t scale) {
  const uint32_t mag = scale & 0x7Fu;
  uint32_t bits = __float_as_uint(__uint_as_float(mag << 20) * 0x1.0p120f) |
                  ((static_cast<uint32_t>(scale) & 0x80u) << 24);
  if (mag == 0x7Fu) bits = 0x7fc00000u;
  return __byte_perm(bits, 0, 0x3232);
}

// Codes 4 Half .. 4 Half + 3 of the word w (eight E2M1 codes, code j in bits 4j..4j+3) times their
// block scale (a bfloat16 pair), as two bfloat16 pairs (codes 4 Half, 4 Half + 1 and the next two;
// the first in the low half). The magnitude bits pick each value's two bytes from tables of the
// eight magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} in bfloat16 (prmt), the sign bits are put in place
// by a third prmt in its sign-replicating mode, and the product with the scale is exact (at most 6
// significant bits, from 2^-10 to 2688): the weight as the reference dequantizes it before scale_2.
// Called for both halves of a word, so the compiler may form the masked and shifted words once.
//
// About 10 instructions for four codes where the version before (2026-12-06, a shifted 16-bit
// argument and each sign bit shifted and masked into place) took 22.5 in the wide expert kernel's
// SASS (Nsight Compute source counters, H100, results/ncu-source-rows192-h100-0916.json): the same
// values, as CudaGroupedExperts.E2m1DecodeEqualsTheReference checks for every code in every place.
template <int Half>
__device__ __forceinline__ void e2m1x4_times_scale(uint32_t w, uint32_t scale2, uint32_t& v01,
                                                   uint32_t& v23) {
  // A set bit 3 would make prmt replicate a sign: the magnitudes' selectors are masked.
  const uint32_t sel = (w & 0x77777777u) >> (16 * Half);
  // Sign of code 2i: bit 8i + 3 of w, the top bit of byte i of w << 4; of code 2i + 1: the top of
  // byte i of w. Selector nibble 8 | b replicates the top bit of byte b of {w, w << 4} (4-7 the
  // latter): byte j of `signs` is 0xff where code 4 Half + j is negative.
  uint32_t signs;
  asm("prmt.b32 %0, %1, %2, %3;\n"
      : "=r"(signs)
      : "r"(w), "r"(w << 4), "n"(Half == 0 ? 0x9D8C : 0xBFAE));
  // The high bytes (sign | top 7 bits) and the low bytes of the four values.
  uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel);
  asm("lop3.b32 %0, %0, %1, 0x80808080, 0xF8;\n" : "+r"(hi) : "r"(signs));  // hi | (signs & mask)
  const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, sel);
  const uint32_t p01 = __byte_perm(lo, hi, 0x5140);
  const uint32_t p23 = __byte_perm(lo, hi, 0x7362);
  uint32_t r01, r23;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r01) : "r"(p01), "r"(scale2));
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r23) : "r"(p23), "r"(scale2));
  v01 = r01;
  v23 = r23;
}

// The same with the half chosen at run time (a constant once the caller's loop is unrolled).
__device__ __forceinline__ void e2m1x4_times_scale(uint32_t w, int half, uint32_t scale2,
                                                   uint32_t& v01, uint32_t& v23) {
  if (half)
    e2m1x4_times_scale<1>(w, scale2, v01, v23);
  else
    e2m1x4_times_scale<0>(w, scale2, v01, v23);
}

}  // namespace drama::cuda

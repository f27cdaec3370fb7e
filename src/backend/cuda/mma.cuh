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

// An E4M3 block scale as a bfloat16 pair (both halves), exactly (4 significant bits).
__device__ __forceinline__ uint32_t e4m3_bf16x2(uint8_t scale) {
  const uint32_t h = __float_as_uint(e4m3_to_f32(scale)) >> 16;
  return h | (h << 16);
}

// Four E2M1 codes (the low 16 bits of v, code j in bits 4j..4j+3) times their block scale (a
// bfloat16 pair), as two bfloat16 pairs (codes 0, 1 and 2, 3; the first in the low half). The
// magnitude bits pick each value's two bytes from tables of the eight magnitudes {0, 0.5, 1, 1.5,
// 2, 3, 4, 6} in bfloat16 (prmt), the sign bit is put in place, and the product with the scale is
// exact (at most 6 significant bits, from 2^-10 to 2688): the weight as the reference dequantizes
// it before scale_2.
__device__ __forceinline__ void e2m1x4_times_scale(uint32_t v, uint32_t scale2, uint32_t& v01,
                                                   uint32_t& v23) {
  const uint32_t sel = v & 0x7777u;  // a set bit 3 would make prmt replicate a sign
  const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel);
  const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, sel);
  uint32_t p01 = __byte_perm(lo, hi, 0x5140);
  uint32_t p23 = __byte_perm(lo, hi, 0x7362);
  p01 |= ((v << 12) & 0x8000u) | ((v << 24) & 0x80000000u);
  p23 |= ((v << 4) & 0x8000u) | ((v << 16) & 0x80000000u);
  uint32_t r01, r23;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r01) : "r"(p01), "r"(scale2));
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r23) : "r"(p23), "r"(scale2));
  v01 = r01;
  v23 = r23;
}

}  // namespace drama::cuda

// The dot products behind every matrix product of the CUDA backend (linear.cu, and the grouped
// expert kernels of moe.cu), so that a weight row gives the same bits against a row of x
// wherever it runs. A warp owns one weight row: lane l sums a fixed strided subset of the
// reduction in increasing order, then warp_sum adds the 32 lane sums in one butterfly order. The
// same lane loop serves up to kRowTile activation rows per weight load; the tile never changes any
// row's order.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace drama::cuda {

constexpr int kRowTile = 4;
constexpr int kAhead = 4;  // loads a lane issues before their arithmetic

// BF16 [in] row against xs[0..nr): lane l owns chunks of 8 inputs c = l, l + 32, ... (in % 8 ==
// 0: one 16-byte load per chunk, kAhead chunks loaded before their arithmetic) or single inputs
// i = l, l + 32, ... (otherwise); each product is added with one fused multiply-add. vec_x: every
// xs[rr] starts on 16 bytes (float4 loads of x).
__device__ __forceinline__ void bf16_lane_dots(const uint16_t* __restrict__ wr, int64_t in,
                                               const float* const* xs, int nr, bool vec_x,
                                               float* acc) {
  const int lane = threadIdx.x % 32;
  if (in % 8 == 0) {
    const int64_t chunks = in / 8;
    for (int64_t g0 = lane; g0 < chunks; g0 += 32 * kAhead) {
      uint4 packed[kAhead];
#pragma unroll
      for (int i = 0; i < kAhead; ++i)
        if (g0 + 32 * i < chunks)
          packed[i] = __ldg(reinterpret_cast<const uint4*>(wr) + g0 + 32 * i);
#pragma unroll
      for (int i = 0; i < kAhead; ++i) {
        const int64_t c = g0 + 32 * i;
        if (c >= chunks) break;
        const uint32_t words[4] = {packed[i].x, packed[i].y, packed[i].z, packed[i].w};
        float wv[8];
        for (int q = 0; q < 4; ++q) {
          wv[2 * q] = __uint_as_float(words[q] << 16);
          wv[2 * q + 1] = __uint_as_float(words[q] & 0xffff0000u);
        }
        for (int rr = 0; rr < kRowTile; ++rr) {
          if (rr >= nr) break;
          const float* xr = xs[rr] + c * 8;
          float xv[8];
          if (vec_x) {  // two 16-byte loads instead of eight 4-byte ones: the same values
            const float4 a = reinterpret_cast<const float4*>(xr)[0];
            const float4 b = reinterpret_cast<const float4*>(xr)[1];
            xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
            xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
          } else {
            for (int e = 0; e < 8; ++e) xv[e] = xr[e];
          }
          for (int e = 0; e < 8; ++e) acc[rr] = fmaf(wv[e], xv[e], acc[rr]);
        }
      }
    }
    return;
  }
  for (int64_t i = lane; i < in; i += 32) {
    const float wv = bf16_to_f32(wr[i]);
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      acc[rr] = fmaf(wv, xs[rr][i], acc[rr]);
    }
  }
}

// Sixteen E2M1 codes (8 bytes, element 2j in the low nibble of byte j) as float32 values
// e2m1 * 2^-14: the code's exponent and mantissa bits placed into a float16's give exactly that
// (section 4's E2M1 is a float16 scaled by 2^14, its subnormal 0.5 included), two at a time.
__device__ __forceinline__ void nvfp4_expand(uint2 packed, float* wv) {
  const uint32_t words[2] = {packed.x, packed.y};
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = words[h] >> (4 * i);  // nibbles i and i + 4 at bits 0-3 and 16-19
      const uint32_t bits = ((v & 0x00070007u) << 9) | ((v & 0x00080008u) << 12);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&bits));
      wv[8 * h + i] = f.x;
      wv[8 * h + i + 4] = f.y;
    }
}

// NVFP4 rows against xs[0..nr): NW weight rows at once (1, or 2 for gate and up), each
// (codes [in/2], scales [in/16]) into its own acc[w * kRowTile + rr]. Lane l owns blocks of 16
// inputs b = l, l + 32, ...; a block's 16 products with x are summed in input order with fused
// multiply-adds, and the block sum is added to the lane's sum times (block scale * 2^14), exact
// (an e4m3 value times a power of two). The caller multiplies the warp's sum by scale_2 once.
// The lane's blocks go in groups of kAhead: every load of a group (all NW rows) is issued before
// any of its arithmetic, so a warp has kAhead * NW loads in flight; the order of the sums is the
// same as one block at a time. vec_x: every xs[rr] starts on 16 bytes (float4 loads).
template <int NW>
__device__ __forceinline__ void nvfp4_lane_dots(const uint8_t* const* cr, const uint8_t* const* sr,
                                                int64_t in, const float* const* xs, int nr,
                                                bool vec_x, float* acc) {
  const int lane = threadIdx.x % 32;
  const int64_t blocks = in / 16;
  for (int64_t g0 = lane; g0 < blocks; g0 += 32 * kAhead) {
    uint2 packed[NW][kAhead];
    uint8_t scale[NW][kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const int64_t b = g0 + 32 * i;
#pragma unroll
      for (int w = 0; w < NW; ++w)
        if (b < blocks) {
          packed[w][i] = __ldg(reinterpret_cast<const uint2*>(cr[w]) + b);
          scale[w][i] = __ldg(sr[w] + b);
        }
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const int64_t b = g0 + 32 * i;
      if (b >= blocks) break;
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float s = e4m3_to_f32(scale[w][i]) * 16384.0f;
        float wv[16];
        nvfp4_expand(packed[w][i], wv);
        for (int rr = 0; rr < kRowTile; ++rr) {
          if (rr >= nr) break;
          const float* xb = xs[rr] + b * 16;
          float part = 0.0f;
          for (int q = 0; q < 4; ++q) {
            const float4 xv =
                vec_x ? reinterpret_cast<const float4*>(xb)[q]
                      : make_float4(xb[4 * q], xb[4 * q + 1], xb[4 * q + 2], xb[4 * q + 3]);
            part = fmaf(wv[4 * q], xv.x, part);
            part = fmaf(wv[4 * q + 1], xv.y, part);
            part = fmaf(wv[4 * q + 2], xv.z, part);
            part = fmaf(wv[4 * q + 3], xv.w, part);
          }
          acc[w * kRowTile + rr] = fmaf(part, s, acc[w * kRowTile + rr]);
        }
      }
    }
  }
}

}  // namespace drama::cuda

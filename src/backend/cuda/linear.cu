#include "backend/cuda/linear.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

namespace drama::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // output columns per block
constexpr int kRowTile = 4;        // rows sharing one weight load

// BF16: lane l owns chunks of 8 inputs c = l, l + 32, ... (Vector = true, in % 8 == 0) or single
// inputs i = l, l + 32, ... (otherwise). Each product is added with one fused multiply-add.
template <bool Vector>
__global__ void bf16_linear_kernel(const uint16_t* __restrict__ w, const float* __restrict__ x,
                                   int64_t rows, int64_t in, int64_t out, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (o >= out) return;
  const uint16_t* wr = w + o * in;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int nr = static_cast<int>(rows - r0 < kRowTile ? rows - r0 : kRowTile);
    float acc[kRowTile] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (Vector) {
      for (int64_t c = lane; c < in / 8; c += 32) {
        const uint4 packed = __ldg(reinterpret_cast<const uint4*>(wr) + c);
        const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
        float wv[8];
        for (int q = 0; q < 4; ++q) {
          wv[2 * q] = __uint_as_float(words[q] << 16);
          wv[2 * q + 1] = __uint_as_float(words[q] & 0xffff0000u);
        }
        for (int rr = 0; rr < kRowTile; ++rr) {
          if (rr >= nr) break;
          const float* xr = x + (r0 + rr) * in + c * 8;
          for (int e = 0; e < 8; ++e) acc[rr] = fmaf(wv[e], xr[e], acc[rr]);
        }
      }
    } else {
      for (int64_t i = lane; i < in; i += 32) {
        const float wv = bf16_to_f32(wr[i]);
        for (int rr = 0; rr < kRowTile; ++rr) {
          if (rr >= nr) break;
          acc[rr] = fmaf(wv, x[(r0 + rr) * in + i], acc[rr]);
        }
      }
    }
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      const float s = warp_sum(acc[rr]);
      if (lane == 0) y[(r0 + rr) * out + o] = s;
    }
  }
}

// NVFP4: lane l owns blocks of 16 inputs b = l, l + 32, ... ; a block's 16 products
// (e2m1 * e4m3, exact in float32) times x are added in input order with fused multiply-adds; the
// warp's sum is multiplied by scale_2 once.
__global__ void nvfp4_linear_kernel(const uint8_t* __restrict__ codes,
                                    const uint8_t* __restrict__ scales, float scale2,
                                    const float* __restrict__ x, int64_t rows, int64_t in,
                                    int64_t out, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (o >= out) return;
  const int64_t blocks = in / 16;
  const uint8_t* cr = codes + o * (in / 2);
  const uint8_t* sr = scales + o * blocks;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int nr = static_cast<int>(rows - r0 < kRowTile ? rows - r0 : kRowTile);
    float acc[kRowTile] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t b = lane; b < blocks; b += 32) {
      const uint2 packed = __ldg(reinterpret_cast<const uint2*>(cr) + b);
      const float s = e4m3_to_f32(__ldg(sr + b));
      float wv[16];
      for (int q = 0; q < 8; ++q) {
        const uint32_t byte = ((q < 4 ? packed.x : packed.y) >> (8 * (q % 4))) & 0xffu;
        wv[2 * q] = e2m1_to_f32(byte & 15) * s;
        wv[2 * q + 1] = e2m1_to_f32(byte >> 4) * s;
      }
      for (int rr = 0; rr < kRowTile; ++rr) {
        if (rr >= nr) break;
        const float* xr = x + (r0 + rr) * in + b * 16;
        for (int e = 0; e < 16; ++e) acc[rr] = fmaf(wv[e], xr[e], acc[rr]);
      }
    }
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      const float s = warp_sum(acc[rr]);
      if (lane == 0) y[(r0 + rr) * out + o] = s * scale2;
    }
  }
}

__global__ void dequantize_kernel(WeightFormat format, const void* data, const uint8_t* scales,
                                  float scale2, int64_t in, int64_t row0, int64_t count,
                                  float* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const int64_t o = row0 + t / in, i = t % in;
  if (format == WeightFormat::BF16) {
    out[t] = bf16_to_f32(static_cast<const uint16_t*>(data)[o * in + i]);
    return;
  }
  const uint8_t byte = static_cast<const uint8_t*>(data)[o * (in / 2) + i / 2];
  const float s = e4m3_to_f32(scales[o * (in / 16) + i / 16]);
  // e2m1 * e4m3 is exact; scale_2 rounds once (as the CPU backend).
  out[t] = e2m1_to_f32(i % 2 == 0 ? (byte & 15) : (byte >> 4)) * s * scale2;
}

}  // namespace

void launch_linear(const LinearWeight& w, const float* x, int64_t rows, float* y,
                   cudaStream_t stream) {
  if (rows <= 0 || w.out <= 0) return;
  const unsigned grid = blocks_for(w.out, kWarpsPerBlock);
  const unsigned threads = 32 * kWarpsPerBlock;
  if (w.format == WeightFormat::NVFP4) {
    nvfp4_linear_kernel<<<grid, threads, 0, stream>>>(static_cast<const uint8_t*>(w.data), w.scales,
                                                      w.scale2, x, rows, w.in, w.out, y);
  } else if (w.in % 8 == 0) {
    bf16_linear_kernel<true><<<grid, threads, 0, stream>>>(static_cast<const uint16_t*>(w.data), x,
                                                           rows, w.in, w.out, y);
  } else {
    bf16_linear_kernel<false><<<grid, threads, 0, stream>>>(static_cast<const uint16_t*>(w.data), x,
                                                            rows, w.in, w.out, y);
  }
  check_launch("linear");
}

void launch_dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out,
                       cudaStream_t stream) {
  const int64_t count = nrows * w.in;
  if (count <= 0) return;
  dequantize_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(w.format, w.data, w.scales,
                                                                w.scale2, w.in, row0, count, out);
  check_launch("dequantize");
}

void CudaBackend::linear(const LinearWeight& w, const float* x, int64_t rows, float* y) {
  launch_linear(w, x, rows, y, stream_);
}

void CudaBackend::dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) {
  launch_dequantize(w, row0, nrows, out, stream_);
}

}  // namespace drama::cuda

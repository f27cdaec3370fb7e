#include "backend/cuda/linear.cuh"

#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/linear_dot.cuh"

namespace drama::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // output columns per block

// One warp per output column o; rows in tiles of kRowTile (linear_dot.cuh).
template <WeightFormat Format>
__global__ void linear_kernel(const void* __restrict__ data, const uint8_t* __restrict__ scales,
                              float scale2, const float* __restrict__ x, int64_t rows, int64_t in,
                              int64_t out, bool vec_x, float* __restrict__ y) {
  pdl_entry();
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (o >= out) return;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int nr = static_cast<int>(rows - r0 < kRowTile ? rows - r0 : kRowTile);
    const float* xs[kRowTile];
    for (int rr = 0; rr < kRowTile; ++rr) xs[rr] = x + (r0 + (rr < nr ? rr : 0)) * in;
    float acc[kRowTile] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (Format == WeightFormat::NVFP4) {
      const uint8_t* cr[1] = {static_cast<const uint8_t*>(data) + o * (in / 2)};
      const uint8_t* sr[1] = {scales + o * (in / 16)};
      nvfp4_lane_dots<1>(cr, sr, in, xs, nr, vec_x, acc);
    } else
      bf16_lane_dots(static_cast<const uint16_t*>(data) + o * in, in, xs, nr, vec_x, acc);
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      const float sum = warp_sum(acc[rr]);
      if (lane == 0) y[(r0 + rr) * out + o] = Format == WeightFormat::NVFP4 ? sum * scale2 : sum;
    }
  }
}

__global__ void dequantize_kernel(WeightFormat format, const void* data, const uint8_t* scales,
                                  float scale2, int64_t in, int64_t row0, int64_t count,
                                  float* out) {
  pdl_entry();
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
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && w.in % 4 == 0;
  if (w.format == WeightFormat::NVFP4)
    launch(linear_kernel<WeightFormat::NVFP4>, grid, threads, 0, stream, w.data, w.scales, w.scale2,
           x, rows, w.in, w.out, vec_x, y);
  else
    launch(linear_kernel<WeightFormat::BF16>, grid, threads, 0, stream, w.data, w.scales, w.scale2,
           x, rows, w.in, w.out, vec_x, y);
  if (timing_kernels()) {
    const std::string name =
        std::string("linear ") + (w.format == WeightFormat::NVFP4 ? "nvfp4 " : "bf16 ") +
        std::to_string(rows) + "x" + std::to_string(w.in) + "->" + std::to_string(w.out);
    check_launch(name.c_str());
  } else {
    check_launch("linear");
  }
}

void launch_dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out,
                       cudaStream_t stream) {
  const int64_t count = nrows * w.in;
  if (count <= 0) return;
  launch(dequantize_kernel, blocks_for(count, 256), 256, 0, stream, w.format, w.data, w.scales,
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

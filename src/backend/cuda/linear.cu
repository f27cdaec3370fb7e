#include "backend/cuda/linear.cuh"

#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/linear_dot.cuh"

namespace drama::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // output columns per block

// One warp per output column o; rows in tiles of Tile (linear_dot.cuh): kRowTile for up to
// kRowTile rows, kWideRowTile beyond, so a batch of 64 rows loads each weight 4 times, not 16.
// Before waiting for the previous kernel (the weights do not depend on it), lane 0 of each warp
// asks L2 for the warp's weight row (prefetch_weight_row), so the fetch overlaps the previous
// kernel's tail under programmatic dependent launch.
template <WeightFormat Format>
__device__ __forceinline__ void prefetch_weight_row(const void* data, const uint8_t* scales,
                                                    int64_t in, int64_t o) {
  if (threadIdx.x % 32 != 0) return;
  if constexpr (Format == WeightFormat::NVFP4) {
    const uint8_t* c = static_cast<const uint8_t*>(data) + o * (in / 2);
    const uint8_t* sc = scales + o * (in / 16);
    if (reinterpret_cast<uintptr_t>(c) % 16 == 0 && (in / 2) % 16 == 0)
      prefetch_l2(c, static_cast<uint32_t>(in / 2));
    if (reinterpret_cast<uintptr_t>(sc) % 16 == 0 && (in / 16) % 16 == 0)
      prefetch_l2(sc, static_cast<uint32_t>(in / 16));
  } else {
    const uint16_t* w = static_cast<const uint16_t*>(data) + o * in;
    if (reinterpret_cast<uintptr_t>(w) % 16 == 0 && (in * 2) % 16 == 0)
      prefetch_l2(w, static_cast<uint32_t>(in * 2));
  }
}

template <WeightFormat Format, int Tile>
__global__ void linear_kernel(const void* __restrict__ data, const uint8_t* __restrict__ scales,
                              float scale2, const float* __restrict__ x, int64_t rows, int64_t in,
                              int64_t out, bool vec_x, bool prefetch, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (prefetch && o < out) prefetch_weight_row<Format>(data, scales, in, o);
  pdl_entry();
  if (o >= out) return;
  for (int64_t r0 = 0; r0 < rows; r0 += Tile) {
    const int nr = static_cast<int>(rows - r0 < Tile ? rows - r0 : Tile);
    const float* xs[Tile];
    for (int rr = 0; rr < Tile; ++rr) xs[rr] = x + (r0 + (rr < nr ? rr : 0)) * in;
    float acc[Tile];
    for (int rr = 0; rr < Tile; ++rr) acc[rr] = 0.0f;
    if constexpr (Format == WeightFormat::NVFP4) {
      const uint8_t* cr[1] = {static_cast<const uint8_t*>(data) + o * (in / 2)};
      const uint8_t* sr[1] = {scales + o * (in / 16)};
      nvfp4_lane_dots<1, Tile>(cr, sr, in, xs, nr, vec_x, acc);
    } else {
      bf16_lane_dots<Tile>(static_cast<const uint16_t*>(data) + o * in, in, xs, nr, vec_x, acc);
    }
    for (int rr = 0; rr < Tile; ++rr) {
      if (rr >= nr) break;
      const float sum = warp_sum(acc[rr]);
      if (lane == 0) y[(r0 + rr) * out + o] = Format == WeightFormat::NVFP4 ? sum * scale2 : sum;
    }
  }
}

// rms_norm_linears: up to kMaxNormLinears products of one input, one launch. The grid is the
// products' column blocks back to back (block0[j] is product j's first); a block of 256 threads
// normalizes each tile of up to `tile` rows into shared memory exactly as rms_norm_kernel does a
// row (thread t squares d = t, t + 256, ... in float64 in increasing d, block_sum's tree over 8
// warps, inv_rms, (x * inv) * w) and stores its slice of them into xn, then each warp runs
// linear_kernel's dot products for its column over those values: the bits of rms_norm followed by
// linear.
constexpr int kMaxNormLinears = 4;
struct NormLinears {
  const void* data[kMaxNormLinears];
  const uint8_t* scales[kMaxNormLinears];
  float scale2[kMaxNormLinears];
  int64_t out[kMaxNormLinears];
  float* y[kMaxNormLinears];
  int64_t block0[kMaxNormLinears + 1];
  int n;
};

template <WeightFormat Format, int Tile>
__global__ void rms_norm_linears_kernel(NormLinears p, const float* __restrict__ x,
                                        const uint16_t* __restrict__ norm_w, int64_t rows,
                                        int64_t dim, float eps, int tile, bool prefetch,
                                        float* __restrict__ xn) {
  extern __shared__ float normed[];  // [tile, dim]
  __shared__ double scratch[32];
  int j = 0;
  while (j + 1 < p.n && blockIdx.x >= p.block0[j + 1]) ++j;
  const int lane = threadIdx.x % 32;
  const int64_t o =
      (static_cast<int64_t>(blockIdx.x) - p.block0[j]) * kWarpsPerBlock + threadIdx.x / 32;
  const bool active = o < p.out[j];  // inactive warps still take part in the norms
  // The weight rows stream into L2 while the block waits for x and normalizes it.
  if (prefetch && active) prefetch_weight_row<Format>(p.data[j], p.scales[j], dim, o);
  pdl_entry();
  for (int64_t t0 = 0; t0 < rows; t0 += tile) {
    const int nt = static_cast<int>(rows - t0 < tile ? rows - t0 : tile);
    for (int rr = 0; rr < nt; ++rr) {
      const float* xr = x + (t0 + rr) * dim;
      double sum = 0.0;
      for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
        sum += static_cast<double>(xr[d]) * xr[d];
      const float inv = inv_rms(block_sum(sum, scratch), dim, eps);
      for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
        normed[rr * dim + d] = (xr[d] * inv) * bf16_to_f32(norm_w[d]);
    }
    __syncthreads();
    // xn: every block stores its own slice of the tile's normed rows.
    const int64_t per = (dim + gridDim.x - 1) / gridDim.x, d0 = blockIdx.x * per;
    const int64_t d1 = d0 + per < dim ? d0 + per : dim;
    for (int rr = 0; rr < nt; ++rr)
      for (int64_t d = d0 + threadIdx.x; d < d1; d += blockDim.x)
        xn[(t0 + rr) * dim + d] = normed[rr * dim + d];
    if (active) {
      for (int r0 = 0; r0 < nt; r0 += Tile) {
        const int nr = nt - r0 < Tile ? nt - r0 : Tile;
        const float* xs[Tile];
        for (int rr = 0; rr < Tile; ++rr) xs[rr] = normed + (r0 + (rr < nr ? rr : 0)) * dim;
        float acc[Tile];
        for (int rr = 0; rr < Tile; ++rr) acc[rr] = 0.0f;
        if constexpr (Format == WeightFormat::NVFP4) {
          const uint8_t* cr[1] = {static_cast<const uint8_t*>(p.data[j]) + o * (dim / 2)};
          const uint8_t* sr[1] = {p.scales[j] + o * (dim / 16)};
          nvfp4_lane_dots<1, Tile>(cr, sr, dim, xs, nr, true, acc);
        } else {
          bf16_lane_dots<Tile>(static_cast<const uint16_t*>(p.data[j]) + o * dim, dim, xs, nr, true,
                               acc);
        }
        for (int rr = 0; rr < Tile; ++rr) {
          if (rr >= nr) break;
          const float sum = warp_sum(acc[rr]);
          if (lane == 0)
            p.y[j][(t0 + r0 + rr) * p.out[j] + o] =
                Format == WeightFormat::NVFP4 ? sum * p.scale2[j] : sum;
        }
      }
    }
    __syncthreads();  // the next tile overwrites `normed`
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
  const bool wide = rows > kRowTile && wide_row_tiles(), prefetch = weight_prefetch();
  if (w.format == WeightFormat::NVFP4)
    launch(wide ? linear_kernel<WeightFormat::NVFP4, kWideRowTile>
                : linear_kernel<WeightFormat::NVFP4, kRowTile>,
           grid, threads, 0, stream, w.data, w.scales, w.scale2, x, rows, w.in, w.out, vec_x,
           prefetch, y);
  else
    launch(wide ? linear_kernel<WeightFormat::BF16, kWideRowTile>
                : linear_kernel<WeightFormat::BF16, kRowTile>,
           grid, threads, 0, stream, w.data, w.scales, w.scale2, x, rows, w.in, w.out, vec_x,
           prefetch, y);
  if (timing_kernels()) {
    const std::string name =
        std::string("linear ") + (w.format == WeightFormat::NVFP4 ? "nvfp4 " : "bf16 ") +
        std::to_string(rows) + "x" + std::to_string(w.in) + "->" + std::to_string(w.out);
    check_launch(name.c_str());
  } else {
    check_launch("linear");
  }
}

bool launch_rms_norm_linears(const float* x, const uint16_t* norm_w, int64_t rows, int64_t dim,
                             float eps, float* xn, const LinearWeight* const* w, float* const* y,
                             int64_t n, cudaStream_t stream) {
  // The normed tile: at most kSharedBytes of rows (opted into above the default 48 KB).
  constexpr int64_t kSharedBytes = 64 * 1024;
  if (!fused_norm_products() || n < 1 || n > kMaxNormLinears || dim % 4 != 0 ||
      dim * 4 > kSharedBytes)
    return false;
  NormLinears p{};
  p.n = static_cast<int>(n);
  int64_t blocks = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (w[j]->format != w[0]->format || w[j]->in != dim) return false;
    if (w[j]->format == WeightFormat::NVFP4 && dim % 16 != 0) return false;
    p.data[j] = w[j]->data;
    p.scales[j] = w[j]->scales;
    p.scale2[j] = w[j]->scale2;
    p.out[j] = w[j]->out;
    p.y[j] = y[j];
    p.block0[j] = blocks;
    blocks += blocks_for(w[j]->out, kWarpsPerBlock);
  }
  p.block0[n] = blocks;
  if (rows <= 0 || blocks == 0) return true;
  const bool wide = rows > kRowTile && wide_row_tiles();
  const int tile = static_cast<int>(
      std::min<int64_t>({rows, wide ? kWideRowTile : kRowTile, kSharedBytes / (dim * 4)}));
  const size_t shared = static_cast<size_t>(tile * dim) * sizeof(float);
  const unsigned grid = static_cast<unsigned>(blocks), threads = 32 * kWarpsPerBlock;
  auto kernel = w[0]->format == WeightFormat::NVFP4
                    ? (wide ? rms_norm_linears_kernel<WeightFormat::NVFP4, kWideRowTile>
                            : rms_norm_linears_kernel<WeightFormat::NVFP4, kRowTile>)
                    : (wide ? rms_norm_linears_kernel<WeightFormat::BF16, kWideRowTile>
                            : rms_norm_linears_kernel<WeightFormat::BF16, kRowTile>);
  if (shared > 48 * 1024)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shared)),
          "cudaFuncSetAttribute (rms_norm_linears shared memory)");
  launch(kernel, grid, threads, shared, stream, p, x, norm_w, rows, dim, eps, tile,
         weight_prefetch(), xn);
  if (timing_kernels()) {
    std::string name = std::string("rms_norm_linears ") +
                       (w[0]->format == WeightFormat::NVFP4 ? "nvfp4 " : "bf16 ") +
                       std::to_string(rows) + "x" + std::to_string(dim) + "->";
    for (int64_t j = 0; j < n; ++j) {
      if (j > 0) name.push_back('+');
      name.append(std::to_string(w[j]->out));
    }
    check_launch(name.c_str());
  } else {
    check_launch("rms_norm_linears");
  }
  return true;
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

void CudaBackend::rms_norm_linears(const float* x, const uint16_t* norm_w, int64_t rows,
                                   int64_t dim, float eps, float* xn, const LinearWeight* const* w,
                                   float* const* y, int64_t n) {
  // Shapes the fused kernel does not take (more products, a row over 48 KB, mixed formats) run
  // as the separate calls.
  if (!launch_rms_norm_linears(x, norm_w, rows, dim, eps, xn, w, y, n, stream_))
    Backend::rms_norm_linears(x, norm_w, rows, dim, eps, xn, w, y, n);
}

void CudaBackend::dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) {
  launch_dequantize(w, row0, nrows, out, stream_);
}

}  // namespace drama::cuda

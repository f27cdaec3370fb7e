#include "backend/cuda/linear.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/linear_dot.cuh"
#include "backend/cuda/mma.cuh"
#include "util/error.h"

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

// ---- BF16 products on tensor cores (the default; DRAMA_CUDA_LINEAR=cores for linear_kernel) ----
//
// y[r, o] = sum_i x[r, i] w[o, i] with mma.sync m16n8k16 (bfloat16 in, float32 accumulate): the
// weight tile is A (16 output columns x 16 inputs), the activations B (16 inputs x 8 rows). Each
// float32 activation is split into three bfloat16 terms by truncation, hi = x with the low 16 bits
// cleared, mid the same of x - hi, lo = x - hi - mid: each difference is exact and x = hi + mid +
// lo exactly (24 significand bits in three pieces of at most 8), so every product of a weight and
// an activation term is exact, and the tensor core only rounds in accumulating (float32). Per
// 16-input step an element gets three mma: lo, then mid into one accumulator, hi into another
// (added at the end: hi + (mid + lo)). In a step, lane (g, t) holds inputs 16 s + 4 t .. + 3 of
// its rows (A rows g and g + 8, B row g): the four k slots mma gives a lane (2t, 2t + 1, 2t + 8,
// 2t + 9) are mapped to four consecutive inputs, one 8-byte weight load and one 16-byte
// activation load; the map is the same for A and B, so each product meets its own partner. Inputs
// past `in` and rows past `rows` or `out` are zeros (adding an exact +0 changes no sum). The
// reduction is cut into `slices` contiguous runs of steps, one warp each, fixed by the shape alone
// (mma_slices), and the warps' sums are added in slice order; a block owns kMmaColumns output
// columns and kMmaRows activation rows, and rows beyond go to further blocks (grid y) that do the
// same arithmetic. So an element's operations never depend on the row count or on which rows
// share its block: batch invariant. A warp issues the weight loads of kMmaAhead steps before
// their arithmetic (the bytes in flight a product at batch 1 needs).
constexpr int kMmaTilesN = 2;             // 8-row tiles per block
constexpr int kMmaColumns = 16;           // output columns per block (one 16-row A tile)
constexpr int kMmaRows = 8 * kMmaTilesN;  // activation rows per block
constexpr int kMmaMaxSlices = 16;         // warps per block
constexpr int64_t kMmaMinSteps = 8;       // 16-input steps a slice has at least
constexpr int kMmaAhead = 8;              // steps whose weights are loaded at once

// DRAMA_CUDA_LINEAR: "cores" for the CUDA-core kernel; unset, empty or "tensor" for tensor cores.
const char* linear_environment() {
  const char* v = std::getenv("DRAMA_CUDA_LINEAR");
  return v ? v : "";
}
std::atomic<bool> g_tensor_linear{std::string(linear_environment()) != "cores"};

struct MmaSlices {
  int slices;
  int64_t steps_per_slice;
};
// Up to 16 slices (512 threads, one block an SM) where the columns make at most a block for
// every SM (132 on the H200), up to 8 (256 threads, two blocks an SM) where they make more: the
// warps in flight a product at batch 1 needs. A function of (in, out) alone.
MmaSlices mma_slices(int64_t in, int64_t out) {
  const int64_t steps = (in + 15) / 16;
  const int64_t most = (out + kMmaColumns - 1) / kMmaColumns <= 132 ? kMmaMaxSlices : 8;
  int64_t slices = std::clamp<int64_t>(steps / kMmaMinSteps, 1, most);
  const int64_t per = (steps + slices - 1) / slices;
  slices = (steps + per - 1) / per;  // no empty slice
  return {static_cast<int>(slices), per};
}

// Staged (the default where it fits: staged_fits): before griddepcontrol.wait the block copies its
// 16 weight rows, all of `in`, into shared memory with cp.async (row r at r * stage_stride(in)
// bytes), so the whole tile is requested at once and its transfer overlaps the kernel before it
// (weights are never written by a step); the warps then read their A fragments there instead of
// from global memory, with the register path's operations in the register path's order: the same
// bits. The row stride is in * 2 rounded up to 128 bytes plus 32, so the 8-byte reads of a half
// warp (rows g .. g + 3, lanes t = 0 .. 3) fall on distinct banks. DRAMA_CUDA_LINEAR_STAGED=0 (or
// set_linear_staged, for the bench) keeps every product on the register path.
constexpr int64_t kMmaStageBytes = 200 * 1024;  // the most shared memory a staged tile may take
__host__ __device__ constexpr int64_t stage_stride(int64_t in) {
  return (in * 2 + 127) / 128 * 128 + 32;
}
std::atomic<bool> g_linear_staged{[] {
  const char* v = std::getenv("DRAMA_CUDA_LINEAR_STAGED");
  return !(v && std::string(v) == "0");
}()};

// DRAMA_CUDA_LINEAR_WIDE_ROWS: unset or empty, the wide layout (linear_bf16_wide_kernel) from
// kLinearWideRows rows on; N > 0, from N rows on; 0, never. Held as -1 for the first.
constexpr int64_t kLinearWideRows = 64;
std::atomic<int64_t> g_linear_wide_rows{[] {
  const char* v = std::getenv("DRAMA_CUDA_LINEAR_WIDE_ROWS");
  return v && *v ? std::atoll(v) : int64_t{-1};
}()};

// Four consecutive BF16 weights of row `row` from input k (zeros past in or out), as two words.
__device__ __forceinline__ uint2 mma_weights(const uint16_t* __restrict__ w, int64_t row,
                                             int64_t out, int64_t in, int64_t k, bool vec) {
  if (row >= out || k >= in) return make_uint2(0, 0);
  const uint16_t* p = w + row * in + k;
  if (vec) return __ldg(reinterpret_cast<const uint2*>(p));
  uint32_t h[4];
  for (int e = 0; e < 4; ++e) h[e] = k + e < in ? __ldg(p + e) : 0;
  return make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
}

// The same four weights from the staged tile (row `row` of the block's 16, below out - o0).
__device__ __forceinline__ uint2 staged_weights(const uint8_t* tile, int64_t stride, int row,
                                                int64_t rows_here, int64_t in, int64_t k) {
  if (row >= rows_here || k >= in) return make_uint2(0, 0);
  return *reinterpret_cast<const uint2*>(tile + row * stride + k * 2);
}

// Four consecutive activations of row `row` from input k (zeros past in or rows).
__device__ __forceinline__ float4 mma_activations(const float* __restrict__ x, int64_t row,
                                                  int64_t rows, int64_t in, int64_t k, bool vec) {
  if (row >= rows || k >= in) return make_float4(0.f, 0.f, 0.f, 0.f);
  const float* p = x + row * in + k;
  if (vec) return *reinterpret_cast<const float4*>(p);
  float v[4];
  for (int e = 0; e < 4; ++e) v[e] = k + e < in ? p[e] : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// The products of one launch (linear: one; linears: the products of one input, side by side in
// the grid's column blocks). Each keeps the slices mma_slices gives its own shape, so every
// element's operations are those of the product launched alone. The block has a warp per slice
// of the product with the most column blocks (linear: its own; q of q, k, v: 8 warps, two
// blocks an SM at 128 registers); a product with more slices runs several a warp, one with
// fewer leaves warps idle.
constexpr int kMaxProducts = 4;
struct MmaProducts {
  int n = 0;
  const uint16_t* w[kMaxProducts];
  float* y[kMaxProducts];
  int64_t out[kMaxProducts];
  int64_t steps_per_slice[kMaxProducts];
  int slices[kMaxProducts];
  bool vec_w[kMaxProducts];
  // Product j owns column blocks [block0[j], block0[j + 1]); wide0 the same in the wide layout's
  // blocks of kWideColumns.
  unsigned block0[kMaxProducts + 1] = {};
  unsigned wide0[kMaxProducts + 1] = {};
  // The residual add folded in (launch_linear_add): each element is stored as y + sum, bitwise
  // what the product into a scratch then add_kernel give (y[i] += x[i]); false: y = sum.
  bool add_to_y = false;
};

// Stores a product's element: its sum, or the sum added to what y holds (MmaProducts::add_to_y).
// Each element is stored once, by one thread.
__device__ __forceinline__ void store_product(float* p, float sum, bool add_to_y) {
  *p = add_to_y ? *p + sum : sum;
}

// One step of the narrow products, in both loops of linear_bf16_mma_kernel (written once, so the
// loops' bits agree by construction): four activations of one row split into their three bfloat16
// terms as mma's B words (split_terms, in place, as take_upper_halves leaves them), then lo and mid
// into acc_low and hi into acc, in that order, against the A fragment a (mma_terms).
__device__ __forceinline__ void split_terms(float4& v, uint32_t (&b)[3][2]) {
#pragma unroll
  for (int term = 0; term < 3; ++term) {
    b[term][0] = take_upper_halves(v.x, v.y);
    b[term][1] = take_upper_halves(v.z, v.w);
  }
}
// A slice's two accumulators (mma_terms' acc and acc_low for each row tile), from zero: every
// slice loop of linear_bf16_mma_kernel starts so.
__device__ __forceinline__ void zero_sums(float (&acc)[kMmaTilesN][4],
                                          float (&acc_low)[kMmaTilesN][4]) {
#pragma unroll
  for (int n = 0; n < kMmaTilesN; ++n)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[n][q] = acc_low[n][q] = 0.0f;
}
__device__ __forceinline__ void mma_terms(float (&acc)[4], float (&acc_low)[4],
                                          const uint32_t (&a)[4], const uint32_t (&b)[3][2]) {
  mma_bf16(acc_low, a, b[2][0], b[2][1]);
  mma_bf16(acc_low, a, b[1][0], b[1][1]);
  mma_bf16(acc, a, b[0][0], b[0][1]);
}

// Registers: 128 on the register path (one block of 512 threads an SM); staged at most 80 (ptxas,
// sm_90a: 72-88 bytes of spills), so q, k and v's blocks of 256 threads fit three an SM as their
// shared memory does (320 blocks in one wave of 132 SMs, not two) and a block leaves registers
// for the kernel before it.
//
// Lean (staged only, where lean_fits: inputs in whole steps, every slice whole groups of
// kMmaAhead steps, x on 16 bytes): the same operations in the same order, without the per-step
// bounds of the general loop (at one row its SASS held 110 instructions a step, 3 of them mma:
// Nsight Compute, H100 2026-12-07 09:15, results/ncu-source-rows1-h100-0915.json). A lane's
// activation row past `rows` reads the last row instead of zeros, and a weight row past `out` is
// zeros staged in the tile: either feeds only a column of D (an activation row) or a row of D (an
// output column) that is never stored, so every stored element keeps its bits.
//
// Split (lean, one product, at most kMmaSplitRows rows: split_fits): the block splits its rows of
// x into their three bfloat16 terms once, into shared memory after the tile (a row's in / 4
// chunks of mma's B words: plane A, uint4 {hi(x0, x1), hi(x2, x3), mid(x0, x1), mid(x2, x3)},
// then plane B, uint2 {lo(x0, x1), lo(x2, x3)}: split_activations, the lean loop's operations on
// the same floats), and each step reads its B words there: at one row every warp otherwise splits
// its own activation tile, 7 of 8 rows of it past `rows` (26% of o's instructions: Nsight Compute,
// H100 2026-12-07 09:25, results/ncu-source-rows1-lean-h100-0923.json). A lane's row past `rows`
// reads the last row, as the lean loop's does. The same bits.
template <bool Several, bool Staged, bool Lean, bool Split = false>
__global__ void __maxnreg__(Staged ? 80 : 128)
    linear_bf16_mma_kernel(const MmaProducts products, const float* __restrict__ x, int64_t rows,
                           int64_t in, bool vec_x) {
  static_assert(Staged || !Lean, "the lean loop reads its weights from the staged tile");
  static_assert(Lean || !Split, "the split rows are read by a lean loop");
  // Dynamic shared memory: staged, the block's weight rows; otherwise the slices' partial sums.
  extern __shared__ __align__(16) uint8_t tile[];
  // Several: the block's product by its column blocks. One product: index 0, a constant, so its
  // fields are read as the single-product kernel read its arguments (a dynamic index into the
  // parameters measured 8% slower on a lone product, H100 2026-12-05: 15.0 against 13.9 us).
  int j = 0;
  if constexpr (Several)
    while (j + 1 < products.n && blockIdx.x >= products.block0[j + 1]) ++j;
  const uint16_t* __restrict__ w = products.w[j];
  float* __restrict__ y = products.y[j];
  const int64_t out = products.out[j], steps_per_slice = products.steps_per_slice[j];
  const bool vec_w = products.vec_w[j];
  const int slices = products.slices[j];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x - products.block0[j]) * kMmaColumns;
  const int64_t rows_here = out - o0 < kMmaColumns ? out - o0 : kMmaColumns;
  const int64_t stride = stage_stride(in);
  if constexpr (Staged) {  // in % 8 == 0 and w on 16 bytes (staged_fits): 16-byte copies
    // Row by row (a division and a remainder a copy, had the rows and chunks been one count,
    // would hold back the copies' issue at batch 1, where they are most of the work).
    const int chunks = static_cast<int>(in / 8);
    const uint8_t* src = reinterpret_cast<const uint8_t*>(w + o0 * in);
    uint8_t* dst = tile;
    for (int64_t r = 0; r < rows_here; ++r, src += in * 2, dst += stride)
      for (int c = threadIdx.x; c < chunks; c += blockDim.x) cp_async16(dst + 16 * c, src + 16 * c);
    cp_async_commit();
    if constexpr (Lean) {  // the lean loop reads the rows past `out` unchecked: zeros
      for (int64_t r = rows_here; r < kMmaColumns; ++r)
        for (int c = threadIdx.x; c < chunks; c += blockDim.x)
          *reinterpret_cast<uint4*>(tile + r * stride + 16 * c) = make_uint4(0, 0, 0, 0);
    }
  }
  pdl_entry();
  // Split: the block's rows of x (all of them: split_fits) as B words, after the tile.
  uint4* const split_plane_a = reinterpret_cast<uint4*>(tile + kMmaColumns * stride);
  if constexpr (Split) {
    const int64_t chunks = in / 4;
    for (int64_t c = threadIdx.x; c < rows * chunks; c += blockDim.x) {
      const int64_t r = c / chunks, q = c % chunks;
      uint2 b;
      const uint4 a = split_activations(*reinterpret_cast<const float4*>(x + r * in + 4 * q), b);
      uint4* plane_a = split_plane_a + r * (chunks + chunks / 2);
      plane_a[q] = a;
      reinterpret_cast<uint2*>(plane_a + chunks)[q] = b;
    }
  }
  if constexpr (Staged) {
    cp_async_wait(0);
    __syncthreads();
  }
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kMmaRows;
  const int64_t row_tiles = (rows - r0 + 7) / 8;
  const int ntiles = static_cast<int>(row_tiles < kMmaTilesN ? row_tiles : kMmaTilesN);
  const int64_t steps = (in + 15) / 16;
  // Slice sl's partial sum of (activation row rr, column oo). Staged, it is written over the
  // slice's own inputs in the tile (row rr's bytes from input 16 * sl * steps_per_slice on: only
  // the slice's warp reads them, it has finished with them (__syncwarp), and at least 64 bytes lie
  // there before the row's end, the stride keeping 32 beyond the last input), so the partials
  // take no shared memory of their own; otherwise a [slice][row][column + 1] array.
  auto partial = [&](int sl, int rr, int oo) -> float& {
    if constexpr (Staged)
      return reinterpret_cast<float*>(tile + rr * stride + sl * steps_per_slice * 32)[oo];
    else
      return reinterpret_cast<float*>(tile)[(sl * kMmaRows + rr) * (kMmaColumns + 1) + oo];
  };
  // A slice's sums: stored (one slice) or written to its partials. Lane (g, t) holds D[g][2t],
  // D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1] of each row tile n: output column g (+ 8),
  // activation row 8 n + 2 t (+ 1).
  auto finish_slice = [&](int slice, const float(&acc)[kMmaTilesN][4],
                          const float(&acc_low)[kMmaTilesN][4]) {
    auto each = [&](auto&& f) {
#pragma unroll
      for (int n = 0; n < kMmaTilesN; ++n)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          f(8 * n + 2 * t + (q & 1), g + 8 * (q >> 1), acc[n][q] + acc_low[n][q]);
    };
    __syncwarp();  // staged: every lane is done reading the slice's inputs before they are written
    if (slices == 1)
      each([&](int rr, int oo, float v) {
        if (r0 + rr < rows && o0 + oo < out)
          store_product(y + (r0 + rr) * out + o0 + oo, v, products.add_to_y);
      });
    else
      each([&](int rr, int oo, float v) { partial(slice, rr, oo) = v; });
  };
  // A slice's sum, from zero into its own partials: the same whichever warp makes it.
  auto run_slice = [&](int slice) {
    const int64_t s0 = slice * steps_per_slice;
    const int64_t s1 = s0 + steps_per_slice < steps ? s0 + steps_per_slice : steps;
    // The hi terms' sums and the mid and lo terms' sums in separate accumulators: the tensor core's
    // accumulation rounding then comes once per step at the size of the sum (hi), not three times.
    float acc[kMmaTilesN][4], acc_low[kMmaTilesN][4];
    zero_sums(acc, acc_low);
    // Step u's A fragment (zeros past the slice): from global memory (all kMmaAhead steps loaded
    // before any arithmetic) or, staged, from shared memory just before its mma.
    auto fragment = [&](int64_t sa, int u, uint32_t(&a)[4]) {
      const int64_t k = 16 * (sa + u) + 4 * t;
      uint2 row_g = make_uint2(0, 0), row_g8 = make_uint2(0, 0);
      if (sa + u < s1 && Staged) {
        row_g = staged_weights(tile, stride, g, rows_here, in, k);
        row_g8 = staged_weights(tile, stride, g + 8, rows_here, in, k);
      } else if (sa + u < s1) {
        row_g = mma_weights(w, o0 + g, out, in, k, vec_w);
        row_g8 = mma_weights(w, o0 + g + 8, out, in, k, vec_w);
      }
      a[0] = row_g.x;   // row g, slots 2t, 2t + 1: inputs k, k + 1
      a[1] = row_g8.x;  // row g + 8, the same inputs
      a[2] = row_g.y;   // row g, slots 2t + 8, 2t + 9: inputs k + 2, k + 3
      a[3] = row_g8.y;
    };
    for (int64_t sa = s0; sa < s1; sa += kMmaAhead) {
      uint32_t a[Staged ? 1 : kMmaAhead][4];
      if constexpr (!Staged) {
#pragma unroll
        for (int u = 0; u < kMmaAhead; ++u) fragment(sa, u, a[u]);
      }
      // Row tile by row tile, the tile's activations of all kMmaAhead steps loaded at once (one
      // latency for the steps, not one a step), then their arithmetic; the order of any element's
      // operations is the same.
#pragma unroll
      for (int n = 0; n < kMmaTilesN; ++n) {
        if (n >= ntiles) break;
        float4 v[kMmaAhead];
#pragma unroll
        for (int u = 0; u < kMmaAhead; ++u)
          v[u] = sa + u < s1
                     ? mma_activations(x, r0 + 8 * n + g, rows, in, 16 * (sa + u) + 4 * t, vec_x)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < kMmaAhead; ++u) {
          if (sa + u >= s1) break;
          uint32_t b[3][2];
          split_terms(v[u], b);
          if constexpr (Staged) fragment(sa, u, a[0]);
          mma_terms(acc[n], acc_low[n], a[Staged ? 0 : u], b);
        }
      }
    }
    finish_slice(slice, acc, acc_low);
  };
  // The lean loop (Lean): run_slice's operations for a slice of whole groups inside `in`.
  auto run_slice_lean = [&](int slice) {
    const int s0 = slice * static_cast<int>(steps_per_slice);
    float acc[kMmaTilesN][4], acc_low[kMmaTilesN][4];
    zero_sums(acc, acc_low);
    // The lane's activations of tile n (row r0 + 8 n + g, the last row past `rows`) and its
    // weights (tile rows g and g + 8), from the slice's first input on.
    const float* xr[kMmaTilesN];
#pragma unroll
    for (int n = 0; n < kMmaTilesN; ++n) {
      const int64_t r = r0 + 8 * n + g < rows ? r0 + 8 * n + g : rows - 1;
      xr[n] = x + r * in + 16 * s0 + 4 * t;
    }
    const uint8_t* ar = tile + g * stride + 32 * s0 + 8 * t;
    const int groups = static_cast<int>(steps_per_slice) / kMmaAhead;
    for (int i = 0; i < groups; ++i, ar += 32 * kMmaAhead) {
#pragma unroll
      for (int n = 0; n < kMmaTilesN; ++n) {
        if (n >= ntiles) break;
        float4 v[kMmaAhead];
#pragma unroll
        for (int u = 0; u < kMmaAhead; ++u)
          v[u] = *reinterpret_cast<const float4*>(xr[n] + 16 * (kMmaAhead * i + u));
#pragma unroll
        for (int u = 0; u < kMmaAhead; ++u) {
          uint32_t b[3][2];
          split_terms(v[u], b);
          const uint2 row_g = *reinterpret_cast<const uint2*>(ar + 32 * u);
          const uint2 row_g8 = *reinterpret_cast<const uint2*>(ar + 8 * stride + 32 * u);
          const uint32_t a[4] = {row_g.x, row_g8.x, row_g.y, row_g8.y};
          mma_terms(acc[n], acc_low[n], a, b);
        }
      }
    }
    finish_slice(slice, acc, acc_low);
  };
  // The lean loop on the block's split rows (Split): each step's B words from shared memory.
  auto run_slice_split = [&](int slice) {
    const int s0 = slice * static_cast<int>(steps_per_slice);
    float acc[kMmaTilesN][4], acc_low[kMmaTilesN][4];
    zero_sums(acc, acc_low);
    const int64_t chunks = in / 4;
    const int64_t r = g < rows ? g : rows - 1;
    const uint4* pa = split_plane_a + r * (chunks + chunks / 2) + 4 * s0 + t;
    const uint2* pb =
        reinterpret_cast<const uint2*>(split_plane_a + r * (chunks + chunks / 2) + chunks) +
        4 * s0 + t;
    const uint8_t* ar = tile + g * stride + 32 * s0 + 8 * t;
    const int steps_here = static_cast<int>(steps_per_slice);
#pragma unroll 8
    for (int u = 0; u < steps_here; ++u) {
      const uint4 va = pa[4 * u];
      const uint2 vb = pb[4 * u];
      const uint2 row_g = *reinterpret_cast<const uint2*>(ar + 32 * u);
      const uint2 row_g8 = *reinterpret_cast<const uint2*>(ar + 8 * stride + 32 * u);
      const uint32_t a[4] = {row_g.x, row_g8.x, row_g.y, row_g8.y};
      const uint32_t b[3][2] = {{va.x, va.y}, {va.z, va.w}, {vb.x, vb.y}};
      mma_terms(acc[0], acc_low[0], a, b);
    }
    finish_slice(slice, acc, acc_low);
  };
  // One product (Several false): a warp per slice, as launched. Several: warp w runs slices w,
  // w + warps, ... (the loop costs spills: 124 bytes at 128 registers, sm_90a, so one product
  // keeps the form without it).
  auto run = [&](int slice) {
    if constexpr (Split)
      run_slice_split(slice);
    else if constexpr (Lean)
      run_slice_lean(slice);
    else
      run_slice(slice);
  };
  if constexpr (Several) {
    for (int slice = warp; slice < slices; slice += static_cast<int>(blockDim.x / 32)) run(slice);
  } else if (warp < slices) {
    run(warp);
  }
  if (slices == 1) return;
  __syncthreads();
  for (int e = threadIdx.x; e < kMmaRows * kMmaColumns; e += blockDim.x) {
    const int rr = e / kMmaColumns, oo = e % kMmaColumns;
    if (r0 + rr >= rows || o0 + oo >= out) continue;
    float sum = partial(0, rr, oo);
    for (int sl = 1; sl < slices; ++sl) sum += partial(sl, rr, oo);
    store_product(y + (r0 + rr) * out + o0 + oo, sum, products.add_to_y);
  }
}

// ---- The wide layout of the tensor-core products: the same bits, for many rows ----
//
// linear_bf16_mma_kernel's arithmetic laid out for steps of many rows (the lanes of a busy
// server). There a block owns 16 columns and 16 rows, so each row's activations are read once for
// every 16 columns (q, k and v at 192 rows: 320 column blocks, 490 MB of activation reads from L2
// for 21 MB of weights). Here a block owns kWideColumns columns (a warp each 16) and 8 x Tiles
// rows, and stages both operands in shared memory a chunk of kWideChunk inputs at a time
// (cp.async, kWideStages chunks in flight), so an activation is read once per kWideColumns
// columns and a weight once per 8 x Tiles rows. The block splits each chunk's activations into
// their three bfloat16 terms once (the narrow layout's operations: the same terms), for all its
// warps, which then read mma's B words as they are. Each warp runs its columns' whole reduction:
// the product's slices (mma_slices) one after the other, each from zero in the same step order with
// the same three mma a step (lo, then mid into acc_low, hi into acc), and adds each slice's sum
// (acc + acc_low) to a running total in slice order, slice 0's sum being the start: the additions
// the narrow layout makes of its partials. So every element has the narrow layout's bits
// (LinearsEqualOneLinearCallEachBitwise checks it), whichever layout runs. The weight chunks of
// the first stages are requested before griddepcontrol.wait (weights are never written by a step),
// the activations after it.
constexpr int kWideWarps = 8;
constexpr int kWideColumns = 16 * kWideWarps;
constexpr int kWideChunk = 64;  // inputs a stage holds: four 16-input steps
constexpr int kWideStages = 3;
// Row strides in shared memory: a weight row's 128 bytes plus 32 (the 8-byte reads of a half warp,
// rows g .. g + 3 at lanes t = 0 .. 3, fall on distinct banks); a staged activation row's 256
// bytes; a split row's plane A (16 bytes for 4 inputs: hi and mid terms) 256 bytes plus 64 (the
// 16-byte reads of a quarter warp, rows g and g + 1, on distinct banks) and plane B (8 bytes for
// 4 inputs: lo terms) 128 plus 32 (a half warp's 8-byte reads, rows g .. g + 3, likewise).
constexpr int kWideWStride = kWideChunk * 2 + 32;
constexpr int kWideXStride = kWideChunk * 4;
constexpr int kWideAStride = kWideChunk * 4 + 64;
constexpr int kWideBStride = kWideChunk * 2 + 32;
__host__ __device__ constexpr int wide_stage_bytes(int tiles) {
  return kWideColumns * kWideWStride + 8 * tiles * kWideXStride;
}
// All the shared memory of a block: the stages, then the split activations of one chunk.
__host__ __device__ constexpr int wide_shared_bytes(int tiles) {
  return kWideStages * wide_stage_bytes(tiles) + 8 * tiles * (kWideAStride + kWideBStride);
}

template <bool Several, int Tiles>
__global__ void __launch_bounds__(32 * kWideWarps, 2)
    linear_bf16_wide_kernel(const MmaProducts products, const float* __restrict__ x, int64_t rows,
                            int64_t in) {
  extern __shared__ __align__(16) uint8_t smem[];
  int j = 0;
  if constexpr (Several)
    while (j + 1 < products.n && blockIdx.x >= products.wide0[j + 1]) ++j;
  const uint16_t* __restrict__ w = products.w[j];
  float* __restrict__ y = products.y[j];
  const int64_t out = products.out[j];
  const int per = static_cast<int>(products.steps_per_slice[j]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x - products.wide0[j]) * kWideColumns;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 8 * Tiles;
  const int chunks = static_cast<int>(in / kWideChunk), steps = static_cast<int>(in / 16);
  constexpr int stage_bytes = wide_stage_bytes(Tiles);
  // A thread's share of a chunk's copies is the same in every chunk: weight pieces (rows
  // threadIdx.x / 8 + 32 i of the block's, piece threadIdx.x % 8) and activation pieces (rows
  // threadIdx.x / 16 + 16 i, piece threadIdx.x % 16). Their sources, destinations and whether their
  // rows exist are found once here, not in every chunk (64-bit products and bound tests a copy):
  // a chunk adds its own offset. The same bytes land in the same places, so the same bits. q/k/v
  // 210 -> 178 us and o 160 -> 138 at 512 rows, H100 2026-12-06 15:42 (results/
  // decode-hoist-linear-h100-1542.json beside decode-gateup32-h100-1542.json); 10 warp
  // instructions a mma at 512 rows, 17 at 192 before (results/ncu-wide-rows512-h100-1553.json).
  constexpr int kWPieces = kWideColumns * 8 / (32 * kWideWarps);
  constexpr int kXPieces = 8 * Tiles * 16 / (32 * kWideWarps);
  static_assert(kWideColumns * 8 % (32 * kWideWarps) == 0 &&
                8 * Tiles * 16 % (32 * kWideWarps) == 0);
  const int w_row = threadIdx.x / 8, w_piece = threadIdx.x % 8;
  const int x_row = threadIdx.x / 16, x_piece = threadIdx.x % 16;
  const uint16_t* const w_src = w + (o0 + w_row) * in + 8 * w_piece;
  const float* const x_src = x + (r0 + x_row) * in + 4 * x_piece;
  const int64_t w_step = int64_t{32 * kWideWarps / 8} * in,
                x_step = int64_t{32 * kWideWarps / 16} * in;
  unsigned w_live = 0, x_live = 0;
#pragma unroll
  for (int i = 0; i < kWPieces; ++i)
    if (o0 + w_row + (32 * kWideWarps / 8) * i < out) w_live |= 1u << i;
#pragma unroll
  for (int i = 0; i < kXPieces; ++i)
    if (r0 + x_row + (32 * kWideWarps / 16) * i < rows) x_live |= 1u << i;
  // Chunk c of the block's weight rows and activation rows into stage st; rows past out or rows
  // are zeros (never stored).
  auto load_w = [&](int c, int st) {
    uint8_t* d = smem + st * stage_bytes + w_row * kWideWStride + 16 * w_piece;
    const uint16_t* s = w_src + c * kWideChunk;
#pragma unroll
    for (int i = 0; i < kWPieces; ++i) {
      uint8_t* di = d + i * (32 * kWideWarps / 8) * kWideWStride;
      if (w_live >> i & 1u)
        cp_async16(di, s + i * w_step);
      else
        *reinterpret_cast<uint4*>(di) = make_uint4(0, 0, 0, 0);
    }
  };
  auto load_x = [&](int c, int st) {
    uint8_t* d =
        smem + st * stage_bytes + kWideColumns * kWideWStride + x_row * kWideXStride + 16 * x_piece;
    const float* s = x_src + c * kWideChunk;
#pragma unroll
    for (int i = 0; i < kXPieces; ++i) {
      uint8_t* di = d + i * (32 * kWideWarps / 16) * kWideXStride;
      if (x_live >> i & 1u)
        cp_async16(di, s + i * x_step);
      else
        *reinterpret_cast<uint4*>(di) = make_uint4(0, 0, 0, 0);
    }
  };
  // Groups: the first stages' weights (one each), then their activations (one each), then one a
  // chunk; waiting for all but the kWideStages - 2 newest leaves chunk c complete at its turn.
  for (int st = 0; st < kWideStages - 1; ++st) {
    if (st < chunks) load_w(st, st);
    cp_async_commit();
  }
  pdl_entry();
  for (int st = 0; st < kWideStages - 1; ++st) {
    if (st < chunks) load_x(st, st);
    cp_async_commit();
  }
  const int64_t row_tiles = (rows - r0 + 7) / 8;
  const int ntiles = static_cast<int>(row_tiles < Tiles ? row_tiles : Tiles);
  uint8_t* split_a = smem + kWideStages * stage_bytes;
  uint8_t* split_b = split_a + 8 * Tiles * kWideAStride;
  // Each slice starts from zero: the accumulators are zeroed here and again where a slice ends
  // (not where the next starts: a conditional zeroing at every step compiles to a select an
  // accumulator a step, 32 instructions against 12 mma at 4 row tiles, PTX 2026-12-06).
  float acc[Tiles][4], acc_low[Tiles][4], total[Tiles][4];
#pragma unroll
  for (int n = 0; n < Tiles; ++n)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[n][q] = acc_low[n][q] = 0.0f;
  // The step's place in its slice and whether a slice has ended yet, counted (not a division by
  // the runtime slice length a step).
  int in_slice = 0;
  bool first_slice = true;
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait(kWideStages - 2);
    __syncthreads();  // chunk c is in; every warp is done with chunk c - 1's stage and split
    if (c + kWideStages - 1 < chunks) {
      load_w(c + kWideStages - 1, (c + kWideStages - 1) % kWideStages);
      load_x(c + kWideStages - 1, (c + kWideStages - 1) % kWideStages);
    }
    cp_async_commit();
    const uint8_t* sw = smem + (c % kWideStages) * stage_bytes;
    {
      // Inputs 4 p .. 4 p + 3 of row rr, split as the narrow layout splits them before its mma.
      const uint8_t* sx = sw + kWideColumns * kWideWStride;
#pragma unroll
      for (int i = 0; i < kXPieces; ++i) {  // a thread splits the pieces it copied
        const int rr = x_row + (32 * kWideWarps / 16) * i, p = x_piece;
        const float4 v = *reinterpret_cast<const float4*>(sx + rr * kWideXStride + 16 * p);
        uint2 lo;
        *reinterpret_cast<uint4*>(split_a + rr * kWideAStride + 16 * p) = split_activations(v, lo);
        *reinterpret_cast<uint2*>(split_b + rr * kWideBStride + 8 * p) = lo;
      }
      __syncthreads();  // the chunk's split activations are in
    }
#pragma unroll
    for (int u = 0; u < kWideChunk / 16; ++u) {
      const int s = c * (kWideChunk / 16) + u;
      // The narrow layout's A fragment: rows g and g + 8 of the warp's 16, inputs 4t .. 4t + 3
      // of the step.
      const uint2 row_g = *reinterpret_cast<const uint2*>(sw + (warp * 16 + g) * kWideWStride +
                                                          (16 * u + 4 * t) * 2);
      const uint2 row_g8 = *reinterpret_cast<const uint2*>(sw + (warp * 16 + g + 8) * kWideWStride +
                                                           (16 * u + 4 * t) * 2);
      const uint32_t a[4] = {row_g.x, row_g8.x, row_g.y, row_g8.y};
#pragma unroll
      for (int n = 0; n < Tiles; ++n) {
        if (n >= ntiles) break;
        // Row 8 n + g's inputs 16 u + 4 t .. + 3: their hi and mid terms, then their lo terms.
        const uint4 va = *reinterpret_cast<const uint4*>(split_a + (8 * n + g) * kWideAStride +
                                                         (4 * u + t) * 16);
        const uint2 vb =
            *reinterpret_cast<const uint2*>(split_b + (8 * n + g) * kWideBStride + (4 * u + t) * 8);
        mma_bf16(acc_low[n], a, vb.x, vb.y);
        mma_bf16(acc_low[n], a, va.z, va.w);
        mma_bf16(acc[n], a, va.x, va.y);
      }
      if (++in_slice == per || s + 1 == steps) {  // the slice's end
#pragma unroll
        for (int n = 0; n < Tiles; ++n)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float part = acc[n][q] + acc_low[n][q];
            total[n][q] = first_slice ? part : total[n][q] + part;
            acc[n][q] = acc_low[n][q] = 0.0f;  // the next slice's start
          }
        first_slice = false;
        in_slice = 0;
      }
    }
  }
  cp_async_wait(0);  // nothing left in flight when the block exits
  // Lane (g, t) holds column g (+ 8) of its warp's 16, rows 8 n + 2 t (+ 1) of each tile.
#pragma unroll
  for (int n = 0; n < Tiles; ++n) {
    if (n >= ntiles) break;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t r = r0 + 8 * n + 2 * t + (q & 1), o = o0 + warp * 16 + g + 8 * (q >> 1);
      if (r < rows && o < out) store_product(y + r * out + o, total[n][q], products.add_to_y);
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

namespace {

// Adds product (w, y) to a launch of linear_bf16_mma_kernel.
void add_mma_product(MmaProducts& p, const LinearWeight& w, float* y) {
  const MmaSlices sl = mma_slices(w.in, w.out);
  const int j = p.n++;
  p.w[j] = static_cast<const uint16_t*>(w.data);
  p.y[j] = y;
  p.out[j] = w.out;
  p.steps_per_slice[j] = sl.steps_per_slice;
  p.slices[j] = sl.slices;
  p.vec_w[j] = reinterpret_cast<uintptr_t>(w.data) % 8 == 0 && w.in % 4 == 0;
  p.block0[j + 1] = p.block0[j] + blocks_for(w.out, kMmaColumns);
  p.wide0[j + 1] = p.wide0[j] + blocks_for(w.out, kWideColumns);
}

// Whether the launch's products stage their weight tiles (the same bits either way): rows of
// whole 16-byte chunks starting on 16 bytes, 16 of them within kMmaStageBytes.
bool staged_fits(const MmaProducts& p, int64_t in) {
  if (!g_linear_staged.load(std::memory_order_relaxed) || in % 8 != 0 ||
      kMmaColumns * stage_stride(in) > kMmaStageBytes)
    return false;
  for (int j = 0; j < p.n; ++j)
    if (reinterpret_cast<uintptr_t>(p.w[j]) % 16 != 0) return false;
  return true;
}

int multiprocessors() {
  static const int n = [] {
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return 132;
    return count;
  }();
  return n;
}

// Whether a launch of `rows` rows takes the wide layout (the same bits either way): from the
// threshold on, inputs in whole chunks, every operand on 16 bytes, and (at the default threshold)
// blocks of 16 rows making a block for every SM (the router's 128 columns at 192 rows make 12:
// the narrow layout's 96 ran 5x as fast, H100 2026-12-06).
bool wide_fits(const MmaProducts& p, const float* x, int64_t rows, int64_t in) {
  const int64_t from = g_linear_wide_rows.load(std::memory_order_relaxed);
  if (from == 0 || rows < (from < 0 ? kLinearWideRows : from) || in % kWideChunk != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  for (int j = 0; j < p.n; ++j)
    if (reinterpret_cast<uintptr_t>(p.w[j]) % 16 != 0) return false;
  return from > 0 || int64_t{p.wide0[p.n]} * blocks_for(rows, 16) >= multiprocessors();
}

// The wide layout: 4 row tiles a block (32 rows) where that makes a block for every SM, else 2.
template <bool Several>
void launch_wide(const MmaProducts& p, const float* x, int64_t rows, int64_t in,
                 cudaStream_t stream) {
  const bool four = int64_t{p.wide0[p.n]} * blocks_for(rows, 32) >= multiprocessors();
  auto* kernel = four ? linear_bf16_wide_kernel<Several, 4> : linear_bf16_wide_kernel<Several, 2>;
  const int64_t bytes = wide_shared_bytes(four ? 4 : 2);
  static std::atomic<int64_t> allowed4{0}, allowed2{0};
  allow_shared(kernel, bytes, four ? allowed4 : allowed2, "linear bf16 wide");
  launch(kernel, dim3(p.wide0[p.n], blocks_for(rows, four ? 32 : 16)), 32 * kWideWarps,
         static_cast<size_t>(bytes), stream, p, x, rows, in);
}

// Whether a staged launch may take the lean loop (the same bits either way): inputs in whole
// 16-input steps, x on 16 bytes, and every product's slices whole groups of kMmaAhead steps that
// end at its last step. DRAMA_CUDA_LINEAR_LEAN=0 (or set_linear_lean, for the bench and the tests)
// keeps the general loop.
std::atomic<bool> g_linear_lean{[] {
  const char* v = std::getenv("DRAMA_CUDA_LINEAR_LEAN");
  return !(v && std::string(v) == "0");
}()};
bool lean_fits(const MmaProducts& p, const float* x, int64_t in) {
  if (!g_linear_lean.load(std::memory_order_relaxed) || in % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  const int64_t steps = in / 16;
  for (int j = 0; j < p.n; ++j)
    if (p.steps_per_slice[j] % kMmaAhead != 0 || steps % p.steps_per_slice[j] != 0) return false;
  return true;
}

// Whether a lean launch may split its rows once per block (Split; the same bits either way): one
// product, at most kMmaSplitRows rows, the tile and the split rows within kMmaSplitBytes of
// shared memory. DRAMA_CUDA_LINEAR_SPLIT=0 (or set_linear_split) keeps every warp splitting its
// own.
constexpr int64_t kMmaSplitRows = 2;
constexpr int64_t kMmaSplitBytes = 227 * 1024;
std::atomic<bool> g_linear_split{[] {
  const char* v = std::getenv("DRAMA_CUDA_LINEAR_SPLIT");
  return !(v && std::string(v) == "0");
}()};
int64_t split_bytes(int64_t rows, int64_t in) {
  return rows * in * 6;
}
bool split_fits(const MmaProducts& p, int64_t rows, int64_t in) {
  return g_linear_split.load(std::memory_order_relaxed) && p.n == 1 && rows <= kMmaSplitRows &&
         kMmaColumns * stage_stride(in) + split_bytes(rows, in) <= kMmaSplitBytes;
}

template <bool Several, bool Staged, bool Lean = false, bool Split = false>
void launch_mma(const MmaProducts& p, dim3 grid, int threads, const float* x, int64_t rows,
                int64_t in, bool vec_x, cudaStream_t stream) {
  auto* kernel = linear_bf16_mma_kernel<Several, Staged, Lean, Split>;
  const int64_t bytes = Staged
                            ? kMmaColumns * stage_stride(in) + (Split ? split_bytes(rows, in) : 0)
                            : int64_t{kMmaMaxSlices} * kMmaRows * (kMmaColumns + 1) * 4;
  static std::atomic<int64_t> allowed{0};
  allow_shared(kernel, bytes, allowed, "linear bf16 mma");
  launch(kernel, grid, threads, static_cast<size_t>(bytes), stream, p, x, rows, in, vec_x);
}

// Returns whether the wide layout ran.
bool launch_mma_products(const MmaProducts& p, const float* x, int64_t rows, int64_t in,
                         cudaStream_t stream) {
  if (wide_fits(p, x, rows, in)) {
    if (p.n == 1)
      launch_wide<false>(p, x, rows, in, stream);
    else
      launch_wide<true>(p, x, rows, in, stream);
    return true;
  }
  int widest = 0;
  for (int j = 1; j < p.n; ++j)
    if (p.block0[j + 1] - p.block0[j] > p.block0[widest + 1] - p.block0[widest]) widest = j;
  const int threads = 32 * p.slices[widest];
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && in % 4 == 0;
  const dim3 grid(p.block0[p.n], blocks_for(rows, kMmaRows));
  const bool staged = staged_fits(p, in);
  const bool lean = staged && lean_fits(p, x, in);
  if (lean && split_fits(p, rows, in))
    launch_mma<false, true, true, true>(p, grid, threads, x, rows, in, vec_x, stream);
  else if (p.n == 1 && lean)
    launch_mma<false, true, true>(p, grid, threads, x, rows, in, vec_x, stream);
  else if (lean)
    launch_mma<true, true, true>(p, grid, threads, x, rows, in, vec_x, stream);
  else if (p.n == 1 && staged)
    launch_mma<false, true>(p, grid, threads, x, rows, in, vec_x, stream);
  else if (p.n == 1)
    launch_mma<false, false>(p, grid, threads, x, rows, in, vec_x, stream);
  else if (staged)
    launch_mma<true, true>(p, grid, threads, x, rows, in, vec_x, stream);
  else
    launch_mma<true, false>(p, grid, threads, x, rows, in, vec_x, stream);
  return false;
}

std::string product_name(const char* kind, int64_t rows, int64_t in) {
  return std::string(kind) + std::to_string(rows) + "x" + std::to_string(in) + "->";
}

}  // namespace

namespace {

// launch_linear and launch_linear_add: add_to_y only on tensor cores (launch_linear_add's check).
void linear_launch(const LinearWeight& w, const float* x, int64_t rows, float* y, bool add_to_y,
                   cudaStream_t stream) {
  if (rows <= 0 || w.out <= 0) return;
  const unsigned grid = blocks_for(w.out, kWarpsPerBlock);
  const unsigned threads = 32 * kWarpsPerBlock;
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && w.in % 4 == 0;
  bool wide = false;
  if (w.format == WeightFormat::BF16 && tensor_linear()) {
    MmaProducts p;
    add_mma_product(p, w, y);
    p.add_to_y = add_to_y;
    wide = launch_mma_products(p, x, rows, w.in, stream);
  } else if (w.format == WeightFormat::NVFP4)
    launch(linear_kernel<WeightFormat::NVFP4>, grid, threads, 0, stream, w.data, w.scales, w.scale2,
           x, rows, w.in, w.out, vec_x, y);
  else
    launch(linear_kernel<WeightFormat::BF16>, grid, threads, 0, stream, w.data, w.scales, w.scale2,
           x, rows, w.in, w.out, vec_x, y);
  if (timing_kernels()) {
    const std::string name = product_name(w.format == WeightFormat::NVFP4 ? "linear nvfp4 "
                                          : wide && add_to_y              ? "linear add bf16 wide "
                                          : wide                          ? "linear bf16 wide "
                                          : add_to_y                      ? "linear add bf16 mma "
                                          : tensor_linear()               ? "linear bf16 mma "
                                                                          : "linear bf16 ",
                                          rows, w.in) +
                             std::to_string(w.out);
    check_launch(name.c_str());
  } else {
    check_launch(add_to_y ? "linear_add" : "linear");
  }
}

}  // namespace

void launch_linear(const LinearWeight& w, const float* x, int64_t rows, float* y,
                   cudaStream_t stream) {
  linear_launch(w, x, rows, y, false, stream);
}

bool launch_linear_add(const LinearWeight& w, const float* x, int64_t rows, float* y,
                       cudaStream_t stream) {
  if (w.format != WeightFormat::BF16 || !tensor_linear()) return false;
  linear_launch(w, x, rows, y, true, stream);
  return true;
}

bool launch_linears(const Backend::Product* products, int64_t n, const float* x, int64_t rows,
                    cudaStream_t stream) {
  if (n < 2 || n > kMaxProducts || !tensor_linear()) return false;
  for (int64_t j = 0; j < n; ++j) {
    const LinearWeight& w = *products[j].w;
    if (w.format != WeightFormat::BF16 || w.in != products[0].w->in || w.out <= 0) return false;
  }
  if (rows <= 0) return true;
  MmaProducts p;
  for (int64_t j = 0; j < n; ++j) add_mma_product(p, *products[j].w, products[j].y);
  const bool wide = launch_mma_products(p, x, rows, products[0].w->in, stream);
  if (timing_kernels()) {
    std::string name =
        product_name(wide ? "linears bf16 wide " : "linears bf16 mma ", rows, products[0].w->in);
    for (int64_t j = 0; j < n; ++j) {
      if (j) name += '+';
      name += std::to_string(products[j].w->out);
    }
    check_launch(name.c_str());
  } else {
    check_launch("linears");
  }
  return true;
}

bool tensor_linear() {
  return g_tensor_linear.load(std::memory_order_relaxed);
}

void check_linear_environment() {
  const std::string v = linear_environment();
  if (!v.empty() && v != "cores" && v != "tensor")
    throw Error("DRAMA_CUDA_LINEAR=" + v + ": cores or tensor");
  const char* s = std::getenv("DRAMA_CUDA_LINEAR_STAGED");
  if (s && *s && std::string(s) != "0" && std::string(s) != "1")
    throw Error(std::string("DRAMA_CUDA_LINEAR_STAGED=") + s + ": 0 or 1");
  for (const char* name : {"DRAMA_CUDA_LINEAR_LEAN", "DRAMA_CUDA_LINEAR_SPLIT"}) {
    const char* l = std::getenv(name);
    if (l && *l && std::string(l) != "0" && std::string(l) != "1")
      throw Error(std::string(name) + "=" + l + ": 0 or 1");
  }
  const char* r = std::getenv("DRAMA_CUDA_LINEAR_WIDE_ROWS");
  if (r && *r && std::string(r).find_first_not_of("0123456789") != std::string::npos)
    throw Error(std::string("DRAMA_CUDA_LINEAR_WIDE_ROWS=") + r +
                ": a row count from which the wide layout runs (0: never)");
}

bool set_tensor_linear_flag(bool on) {
  return g_tensor_linear.exchange(on, std::memory_order_relaxed);
}

bool set_linear_staged_flag(bool on) {
  return g_linear_staged.exchange(on, std::memory_order_relaxed);
}

bool set_linear_lean_flag(bool on) {
  return g_linear_lean.exchange(on, std::memory_order_relaxed);
}

bool set_linear_split_flag(bool on) {
  return g_linear_split.exchange(on, std::memory_order_relaxed);
}

int64_t set_linear_wide_rows_flag(int64_t rows) {
  if (rows < -1)
    throw Error("linear wide rows " + std::to_string(rows) + ": -1 (the default), 0 or more");
  return g_linear_wide_rows.exchange(rows, std::memory_order_relaxed);
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

void CudaBackend::linear_add(const LinearWeight& w, const float* x, int64_t rows, float* scratch,
                             float* y) {
  if (!launch_linear_add(w, x, rows, y, stream_)) Backend::linear_add(w, x, rows, scratch, y);
}

void CudaBackend::linears(const Product* products, int64_t n, const float* x, int64_t rows) {
  if (!launch_linears(products, n, x, rows, stream_)) Backend::linears(products, n, x, rows);
}

void CudaBackend::dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) {
  launch_dequantize(w, row0, nrows, out, stream_);
}

}  // namespace drama::cuda

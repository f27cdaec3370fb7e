#include "backend/cuda/ceilings.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/mma.cuh"

namespace drama::cuda {

namespace {

// Eight independent chains of fused multiply-adds per thread.
__global__ void fma_kernel(float* out, int iters) {
  float a[8];
  for (int i = 0; i < 8; ++i) a[i] = threadIdx.x * 1e-3f + i;
  for (int it = 0; it < iters; ++it)
    for (int i = 0; i < 8; ++i) a[i] = fmaf(a[i], 0.999999f, 1e-7f);
  float s = 0;
  for (int i = 0; i < 8; ++i) s += a[i];
  if (s == 12345.0f) out[0] = s;  // never true; keeps the chains alive
}

// kMmaChains independent mma.sync m16n8k16 tiles (bfloat16 in, float32 accumulate) per warp,
// `iters` rounds: 8 calls in flight a warp, two warps of a block on each of an SM's four
// schedulers and several blocks an SM, to cover the instruction's latency. The operands are
// bfloat16 values near 1 and 2^-8 from the thread index (so nothing is known at compile time);
// mma_bf16 is asm volatile, so no call is dropped.
constexpr int kMmaChains = 8;
__global__ void mma_kernel(float* out, int iters) {
  const uint32_t one = 0x3f80u + (threadIdx.x & 7u), small = 0x3b80u + (threadIdx.x & 3u);
  const uint32_t a[4] = {one | (one << 16), small | (one << 16), one | (small << 16),
                         small | (small << 16)};
  const uint32_t b0 = small | (one << 16), b1 = one | (small << 16);
  float d[kMmaChains][4];
  for (int c = 0; c < kMmaChains; ++c)
    for (int q = 0; q < 4; ++q) d[c][q] = 0.0f;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int c = 0; c < kMmaChains; ++c) mma_bf16(d[c], a, b0, b1);
  float s = 0;
  for (int c = 0; c < kMmaChains; ++c)
    for (int q = 0; q < 4; ++q) s += d[c][q];
  if (s == 12345.0f) out[0] = s;  // never true; keeps the results alive
}

}  // namespace

DeviceCeilings measure_device_ceilings() {
  DeviceCeilings c;
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, n), "cudaMalloc");
  check(cudaMalloc(&b, n), "cudaMalloc");
  check(cudaMemset(a, 1, n), "cudaMemset");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  // The best time of `runs` calls of `work` after a first one that warms up, in milliseconds.
  const auto best_ms = [&](int runs, const auto& work) {
    float best = 1e30f;
    for (int i = 0; i <= runs; ++i) {
      check(cudaEventRecord(t0), "cudaEventRecord");
      work();
      check(cudaEventRecord(t1), "cudaEventRecord");
      check(cudaEventSynchronize(t1), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
      if (i > 0) best = std::min(best, ms);
    }
    return static_cast<double>(best);
  };
  const double copy_ms =
      best_ms(5, [&] { check(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy"); });
  c.copy_bytes_per_s = 2.0 * static_cast<double>(n) / (copy_ms * 1e-3);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const int iters = 4096, threads = 256, blocks = prop.multiProcessorCount * 8;
  const double fma_ms = best_ms(3, [&] {
    fma_kernel<<<blocks, threads>>>(static_cast<float*>(b), iters);
    check_launch("fma ceiling");
  });
  c.fma_flops_per_s = 2.0 * 8.0 * iters * double(threads) * blocks / (fma_ms * 1e-3);
  // Tensor cores, the same way (a warm-up launch, then the best of 3), with as many blocks as are
  // resident at once on every SM (one full wave: its registers allow fewer blocks than the FMA
  // kernel's, and a partial second wave would count its idle SMs against the rate).
  const int mma_iters = 4096;
  int mma_per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&mma_per_sm, mma_kernel, threads, 0),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int mma_blocks = prop.multiProcessorCount * std::max(mma_per_sm, 1);
  const double mma_ms = best_ms(3, [&] {
    mma_kernel<<<mma_blocks, threads>>>(static_cast<float*>(b), mma_iters);
    check_launch("mma ceiling");
  });
  const double warps = double(threads) / 32 * mma_blocks;
  c.mma_bf16_flops_per_s =
      2.0 * 16 * 8 * 16 * kMmaChains * double(mma_iters) * warps / (mma_ms * 1e-3);
  (void)cudaEventDestroy(t0);
  (void)cudaEventDestroy(t1);
  (void)cudaFree(a);
  (void)cudaFree(b);
  return c;
}

std::string device_description() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0, sm_khz = 0, mem_khz = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, 0);
  (void)cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
         std::to_string(prop.totalGlobalMem >> 20) + " MiB, CUDA driver API " + ver(driver) +
         ", runtime " + ver(runtime) + ", max SM clock " + std::to_string(sm_khz / 1000) +
         " MHz, memory clock " + std::to_string(mem_khz / 1000) + " MHz";
}

}  // namespace drama::cuda

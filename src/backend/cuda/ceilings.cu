#include "backend/cuda/ceilings.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

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
  float best = 1e30f;
  for (int i = 0; i < 6; ++i) {
    check(cudaEventRecord(t0), "cudaEventRecord");
    check(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    check(cudaEventRecord(t1), "cudaEventRecord");
    check(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    if (i > 0) best = std::min(best, ms);  // the first copy warms up
  }
  c.copy_bytes_per_s = 2.0 * static_cast<double>(n) / (best * 1e-3);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const int iters = 4096, threads = 256, blocks = prop.multiProcessorCount * 8;
  best = 1e30f;
  for (int i = 0; i < 4; ++i) {
    check(cudaEventRecord(t0), "cudaEventRecord");
    fma_kernel<<<blocks, threads>>>(static_cast<float*>(b), iters);
    check_launch("fma ceiling");
    check(cudaEventRecord(t1), "cudaEventRecord");
    check(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    if (i > 0) best = std::min(best, ms);
  }
  c.fma_flops_per_s = 2.0 * 8.0 * iters * double(threads) * blocks / (best * 1e-3);
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

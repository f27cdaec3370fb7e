// Shared pieces of the CUDA kernels: error checks, launch shapes and the storage decoders (BF16,
// E4M3, E2M1) in device code. Only files in src/backend/cuda/ include this (or any CUDA header).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

namespace drama::cuda {

// Throws drama::Error naming the call and CUDA's message.
void check(cudaError_t status, const char* what);
// Checks the launch that was just queued (bad shapes, no kernel image for this device).
// While time_each_kernel (grouped_experts.h) runs, also times that kernel alone.
void check_launch(const char* kernel);
// Whether time_each_kernel is running (launchers then name their kernels in more detail).
bool timing_kernels();
// Seconds per launch of `exec` on `stream`: the median of `replays` timed with device events,
// after three untimed warm-up launches (for the benches' graph measurements). Takes `exec`: it is
// destroyed before the call returns or throws.
double median_replay_seconds(cudaGraphExec_t exec, cudaStream_t stream, int replays);

// Programmatic dependent launch (Hopper): while on, every kernel of the backend is launched with
// programmatic stream serialization allowed, and every such kernel starts with pdl_entry(): it
// waits (griddepcontrol.wait) until the kernel before it on the stream has completed and its
// memory is visible, then lets the next kernel launch (griddepcontrol.launch_dependents). So the
// next kernel's launch and block scheduling overlap this one's run, and no kernel reads anything
// before its predecessor is done: the results are those of plain stream order. On unless
// DRAMA_CUDA_PDL=0; set_programmatic_launch (grouped_experts.h) switches it for the bench.
bool programmatic_launch();

__device__ __forceinline__ void pdl_entry() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// kernel<<<grid, block, shared, stream>>>(args...), with the programmatic launch attribute while
// programmatic_launch() is on.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  // A launch error is read by the check_launch that follows every launch.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Opts `kernel` into `bytes` of dynamic shared memory (beyond the 48 KiB every kernel may use),
// once per size it grows to; `allowed` is the kernel's own record (a static of its launcher).
template <typename Kernel>
void allow_shared(Kernel kernel, int64_t bytes, std::atomic<int64_t>& allowed, const char* what) {
  if (bytes <= 48 * 1024 || bytes <= allowed.load()) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        (std::string("cudaFuncSetAttribute (shared memory of ") + what + ")").c_str());
  allowed.store(bytes);
}

inline unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Asynchronous copies from global to shared memory (sm_80+): 16 bytes (both addresses on 16
// bytes; bypassing L1), 8 or 4 (both on that many bytes); commit_group closes this thread's copies
// issued since the last one into a group; cp_async_wait(n) waits until at most n (0..2) of its
// groups are still in flight. The copies are visible to the block after the wait and a
// __syncthreads.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait(int pending) {
  if (pending <= 0)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  else if (pending == 1)
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  else
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// float8_e4m3fn: bias 7, no infinities, 0x7f / 0xff are NaN (as util/dtype.cpp).
__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 15, man = v & 7;
  float r;
  if (exp == 15 && man == 7) return __int_as_float(0x7fc00000);
  if (exp == 0)
    r = static_cast<float>(man) * 0x1.0p-9f;  // man / 8 * 2^-6, exact
  else
    r = __uint_as_float(((exp + 120) << 23) | (man << 20));  // 2^(exp-7) * (1 + man/8)
  return sign ? -r : r;
}

// E2M1: bit 3 sign, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}: twice each magnitude is one nibble
// of 0xC8643210 (an integer, converted exactly, then halved exactly).
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  const float m = static_cast<float>((0xC8643210u >> (4 * (code & 7))) & 15) * 0.5f;
  return (code & 8) ? -m : m;
}

// A float sum over a warp in one fixed butterfly order; every lane gets the same bits (each step
// adds two values, and a + b == b + a).
__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int m = 16; m >= 1; m /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024) in a fixed order: each
// warp's butterfly, then warp 0 sums the warps' results the same way. Every thread gets the
// result. `scratch` holds 32 values.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T w = lane < warps ? scratch[lane] : T(0);
  w = warp_sum(w);
  return w;
}
// Whether this block is the last of the `used` blocks counting on `counter` (each has written
// its outputs before the call: the fence makes them visible first); the one that is reads them
// after a second fence (with loads that skip L1: __ldcg). Every thread of the block calls it and
// gets the same answer.
__device__ inline bool last_to_finish(unsigned* counter, int used) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(used - 1);
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// The threads of a block that normalises one row as rms_norm does (rms_norm_kernel and the kernels
// that give its bits: block_sum's tree depends on the block's warps).
constexpr int kRowNormThreads = 256;
// rms_norm's 1 / sqrt(mean + eps) from a row's float64 sum of squares (every kernel that
// normalises a row as rms_norm does uses this).
__device__ __forceinline__ float inv_rms(double sum_of_squares, int64_t dim, float eps) {
  const float mean = static_cast<float>(sum_of_squares / static_cast<double>(dim));
  return 1.0f / sqrtf(mean + eps);
}

// rms_norm's normalisation of one row, shared by every kernel that gives its bits (rms_norm_kernel,
// expert_sum_add_norm_kernel): each thread's squares in float64 in increasing element order,
// block_sum's tree, inv_rms, then y = (x * inv) * w. The callers load the row their own way (before
// or after their wait, through L1 or past it), so the loads stay theirs.
// PerThread > 0: xv[i] and wv[i] hold element threadIdx.x + i * blockDim.x (anything past dim).
template <int PerThread>
__device__ __forceinline__ void norm_row_in_registers(const float (&xv)[PerThread],
                                                      const float (&wv)[PerThread], int64_t dim,
                                                      float eps, double* scratch, float* yr) {
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < PerThread; ++i)
    if (threadIdx.x + static_cast<int64_t>(i) * blockDim.x < dim)
      sum += static_cast<double>(xv[i]) * xv[i];
  const float inv = inv_rms(block_sum(sum, scratch), dim, eps);
#pragma unroll
  for (int i = 0; i < PerThread; ++i) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (d < dim) yr[d] = (xv[i] * inv) * wv[i];
  }
}
// Any dim: element d read twice through load(d), once for the squares and once for the output.
template <class Load>
__device__ __forceinline__ void norm_row_reread(Load load, const uint16_t* __restrict__ w,
                                                int64_t dim, float eps, double* scratch,
                                                float* yr) {
  double sum = 0.0;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const float v = load(d);
    sum += static_cast<double>(v) * v;
  }
  const float inv = inv_rms(block_sum(sum, scratch), dim, eps);
  __syncthreads();  // y may be the row read: every thread has read its inputs
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
    yr[d] = (load(d) * inv) * bf16_to_f32(w[d]);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float w = lane < warps ? scratch[lane] : -__int_as_float(0x7f800000);
  return warp_max(w);
}

}  // namespace drama::cuda

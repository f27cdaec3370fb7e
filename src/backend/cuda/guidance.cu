#include "backend/cuda/guidance.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

namespace drama::cuda {

namespace {

__global__ void guidance_kernel(const float* cond, const float* uncond, int64_t n, float gamma,
                                float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = uncond[i] + gamma * (cond[i] - uncond[i]);
}

__global__ void guidance_rows_kernel(const float* __restrict__ logits, int64_t vocab,
                                     const GuidanceRowSpec* __restrict__ rows, int64_t n,
                                     float* __restrict__ out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * vocab) return;
  const int64_t i = e / vocab, v = e % vocab;
  const GuidanceRowSpec g = rows[i];
  const float c = logits[static_cast<int64_t>(g.cond_row) * vocab + v];
  if (g.uncond_row < 0) {
    out[e] = c;
    return;
  }
  const float u = logits[static_cast<int64_t>(g.uncond_row) * vocab + v];
  out[e] = u + g.gamma * (c - u);
}

__global__ void non_finite_kernel(const float* __restrict__ x, int64_t n, int32_t* flag) {
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bad |= !isfinite(x[i]);
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) *flag = 1;
}

}  // namespace

void launch_guidance_combine(const float* cond, const float* uncond, int64_t n, float gamma,
                             float* out, cudaStream_t stream) {
  if (n <= 0) return;
  guidance_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(cond, uncond, n, gamma, out);
  check_launch("guidance_combine");
}

void launch_guidance_rows(const float* logits, int64_t vocab, const GuidanceRowSpec* rows,
                          int64_t n, float* out, cudaStream_t stream) {
  if (n * vocab <= 0) return;
  guidance_rows_kernel<<<blocks_for(n * vocab, 256), 256, 0, stream>>>(logits, vocab, rows, n, out);
  check_launch("guidance_combine");
}

void launch_non_finite(const float* x, int64_t n, int32_t* flag, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned grid = blocks_for(n, 256) < 1024 ? blocks_for(n, 256) : 1024;
  non_finite_kernel<<<grid, 256, 0, stream>>>(x, n, flag);
  check_launch("has_non_finite");
}

void CudaBackend::guidance_combine(const float* cond, const float* uncond, int64_t n, float gamma,
                                   float* out) {
  launch_guidance_combine(cond, uncond, n, gamma, out, stream_);
}

bool CudaBackend::has_non_finite(const float* x, int64_t n) {
  check(cudaMemsetAsync(flag_, 0, sizeof(int32_t), stream_), "cudaMemsetAsync");
  launch_non_finite(x, n, flag_, stream_);
  check(cudaMemcpyAsync(host_flag_, flag_, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
        "has_non_finite read-back");
  synchronize();
  return *host_flag_ != 0;
}

}  // namespace drama::cuda

#include "backend/cuda/guidance.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"

namespace drama::cuda {

namespace {

__global__ void guidance_rows_kernel(const float* __restrict__ logits, int64_t vocab,
                                     const GuidanceRow* __restrict__ rows, int64_t n,
                                     float* __restrict__ out) {
  pdl_entry();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * vocab) return;
  const int64_t i = e / vocab, v = e % vocab;
  const GuidanceRow g = rows[i];
  const float c = logits[static_cast<int64_t>(g.cond_row) * vocab + v];
  if (g.uncond_row < 0) {
    out[e] = c;
    return;
  }
  const float u = logits[static_cast<int64_t>(g.uncond_row) * vocab + v];
  out[e] = u + g.gamma * (c - u);
}

}  // namespace

void launch_guidance_rows(const float* logits, int64_t vocab, const GuidanceRow* rows, int64_t n,
                          float* out, cudaStream_t stream) {
  if (n * vocab <= 0) return;
  launch(guidance_rows_kernel, blocks_for(n * vocab, 256), 256, 0, stream, logits, vocab, rows, n,
         out);
  check_launch("guidance_combine");
}

void CudaBackend::guidance_combine(const float* logits, int64_t vocab, const GuidanceRow* rows,
                                   int64_t n, float* out) {
  launch_guidance_rows(logits, vocab, rows, n, out, stream_);
}

}  // namespace drama::cuda

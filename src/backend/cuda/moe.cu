#include "backend/cuda/moe.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kMaxTopk = 64;

__global__ void route_topk_kernel(const float* __restrict__ logits, int64_t logit_stride,
                                  const int32_t* __restrict__ logit_column,
                                  const int32_t* __restrict__ original_id, int64_t n_stored,
                                  int64_t k, bool norm_topk, int32_t* __restrict__ expert_index,
                                  float* __restrict__ weight) {
  extern __shared__ float shared[];
  float* prob = shared;                                          // [n_stored]
  int32_t* by_id = reinterpret_cast<int32_t*>(prob + n_stored);  // stored index by id rank
  const int64_t r = blockIdx.x;
  const float* l = logits + r * logit_stride;
  for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) {
    int64_t rank = 0;
    for (int64_t t = 0; t < n_stored; ++t) rank += original_id[t] < original_id[s];
    by_id[rank] = static_cast<int32_t>(s);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float max = -__int_as_float(0x7f800000);
  for (int64_t s = 0; s < n_stored; ++s) max = fmaxf(max, l[logit_column[s]]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n_stored; ++i) {
    const int32_t s = by_id[i];
    prob[s] = expf(l[logit_column[s]] - max);
    sum += prob[s];
  }
  for (int64_t s = 0; s < n_stored; ++s) prob[s] /= sum;
  int32_t chosen[kMaxTopk];
  float kept = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t s = 0; s < n_stored; ++s) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= chosen[i] == s;
      if (taken) continue;
      if (best < 0 || prob[s] > prob[best] ||
          (prob[s] == prob[best] && original_id[s] < original_id[best]))
        best = static_cast<int32_t>(s);
    }
    chosen[j] = best;
    kept += prob[best];
  }
  for (int64_t j = 0; j < k; ++j) {
    expert_index[r * k + j] = chosen[j];
    weight[r * k + j] = norm_topk ? prob[chosen[j]] / kept : prob[chosen[j]];
  }
}

__global__ void expert_combine_kernel(const float* __restrict__ expert_out,
                                      const float* __restrict__ weight, int64_t rows, int64_t k,
                                      int64_t dim, float* y) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * dim) return;
  const int64_t r = t / dim, d = t % dim;
  float acc = y[t];
  for (int64_t j = 0; j < k; ++j) acc += weight[r * k + j] * expert_out[(r * k + j) * dim + d];
  y[t] = acc;
}

}  // namespace

void launch_route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                       const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                       int64_t k, bool norm_topk, int32_t* expert_index, float* weight,
                       cudaStream_t stream) {
  if (rows <= 0) return;
  if (k > kMaxTopk || k > n_stored)
    throw Error("CUDA route_topk: k = " + std::to_string(k) + " must be at most " +
                std::to_string(kMaxTopk) + " and at most the stored experts.");
  const size_t shared = static_cast<size_t>(n_stored) * (sizeof(float) + sizeof(int32_t));
  route_topk_kernel<<<static_cast<unsigned>(rows), 128, shared, stream>>>(
      logits, logit_stride, logit_column, original_id, n_stored, k, norm_topk, expert_index,
      weight);
  check_launch("route_topk");
}

void launch_expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                           int64_t dim, float* y, cudaStream_t stream) {
  if (rows * dim <= 0) return;
  expert_combine_kernel<<<blocks_for(rows * dim, 256), 256, 0, stream>>>(expert_out, weight, rows,
                                                                         k, dim, y);
  check_launch("expert_combine");
}

void CudaBackend::route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                             const int32_t* logit_column, const int32_t* original_id,
                             int64_t n_stored, int64_t k, bool norm_topk, int32_t* expert_index,
                             float* weight) {
  launch_route_topk(logits, rows, logit_stride, logit_column, original_id, n_stored, k, norm_topk,
                    expert_index, weight, stream_);
}

void CudaBackend::expert_combine(const float* expert_out, const float* weight, int64_t rows,
                                 int64_t k, int64_t dim, float* y) {
  launch_expert_combine(expert_out, weight, rows, k, dim, y, stream_);
}

}  // namespace drama::cuda

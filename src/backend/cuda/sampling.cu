#include "backend/cuda/sampling.cuh"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"
#include "util/sampling.h"

namespace drama::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kSortRounds = 64;  // top-k up to this by arg-max rounds, beyond it a full sort

// a comes before b: higher score, or equal and lower id (b < 0: nothing yet).
__device__ __forceinline__ bool before(float sa, int32_t a, float sb, int32_t b) {
  return b < 0 || (a >= 0 && (sa > sb || (sa == sb && a < b)));
}

// The warp's first (score, id) by `before`, left in every lane's bs and bi.
__device__ __forceinline__ void warp_first(float& bs, int32_t& bi) {
  for (int m = 16; m >= 1; m /= 2) {
    const float os = __shfl_xor_sync(0xffffffffu, bs, m);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, m);
    if (before(os, oi, bs, bi)) {
      bs = os;
      bi = oi;
    }
  }
}

// The block's first candidate by `before` among ids not yet taken; every thread gets it.
__device__ int32_t block_first(const float* s, const uint8_t* taken, int64_t vocab, float* sv,
                               int32_t* si) {
  float bs = 0.0f;
  int32_t bi = -1;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    if (!taken[i] && before(s[i], static_cast<int32_t>(i), bs, bi)) {
      bs = s[i];
      bi = static_cast<int32_t>(i);
    }
  warp_first(bs, bi);
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    sv[threadIdx.x / 32] = bs;
    si[threadIdx.x / 32] = bi;
  }
  __syncthreads();
  bs = sv[0];
  bi = si[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
    if (before(sv[w], si[w], bs, bi)) {
      bs = sv[w];
      bi = si[w];
    }
  return bi;
}

__global__ void sample_rows_kernel(const float* __restrict__ logits, int64_t vocab,
                                   const SampleRow* __restrict__ rows, int64_t codebook,
                                   int32_t* ids, int32_t* flags, int64_t stride, int sort_size) {
  pdl_entry();
  extern __shared__ float shared[];
  float* s = shared;                                       // [vocab] scores
  int32_t* order = reinterpret_cast<int32_t*>(s + vocab);  // [max(kSortRounds, sort_size)]
  const int order_len = sort_size > kSortRounds ? sort_size : kSortRounds;
  float* key = reinterpret_cast<float*>(order + order_len);      // [sort_size] sort keys
  uint8_t* taken = reinterpret_cast<uint8_t*>(key + sort_size);  // [vocab]
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  __shared__ int any_bad;
  const int64_t r = blockIdx.x;
  const float* l = logits + r * vocab;
  const SampleRow p = rows[r];
  if (threadIdx.x == 0) any_bad = 0;
  __syncthreads();
  bool bad = false;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) bad |= !isfinite(l[i]);
  if (bad) any_bad = 1;
  __syncthreads();
  if (any_bad) {
    if (threadIdx.x == 0) {
      ids[r * stride] = 0;
      if (flags[r * stride] == 0) flags[r * stride] = static_cast<int32_t>(codebook + 1);
    }
    return;
  }
  const int32_t n = static_cast<int32_t>(vocab);
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) taken[i] = 0;
  if (p.temperature <= 0.0f) {
    // Greedy: the highest logit, lowest id on ties.
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) s[i] = l[i];
    __syncthreads();
    const int32_t best = block_first(s, taken, vocab, sv, si);
    if (threadIdx.x == 0) ids[r * stride] = best;
    return;
  }
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) s[i] = l[i] / p.temperature;
  __syncthreads();
  int32_t keep = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  if (keep <= kSortRounds) {
    for (int32_t j = 0; j < keep; ++j) {
      const int32_t c = block_first(s, taken, vocab, sv, si);
      if (threadIdx.x == 0) {
        order[j] = c;
        taken[c] = 1;
      }
      __syncthreads();
    }
  } else {
    // Bitonic sort of (score, id) over sort_size entries, padding last.
    for (int i = threadIdx.x; i < sort_size; i += blockDim.x) {
      key[i] = i < n ? s[i] : -__int_as_float(0x7f800000);
      order[i] = i < n ? i : -1;
    }
    __syncthreads();
    for (int size = 2; size <= sort_size; size *= 2)
      for (int half = size / 2; half >= 1; half /= 2) {
        for (int i = threadIdx.x; i < sort_size; i += blockDim.x) {
          const int j = i ^ half;
          if (j <= i) continue;
          const bool ascending_block = (i & size) == 0;  // this run sorts in `before` order
          const bool j_first = before(key[j], order[j], key[i], order[i]);
          if (j_first == ascending_block) {
            const float tk = key[i];
            key[i] = key[j];
            key[j] = tk;
            const int32_t to = order[i];
            order[i] = order[j];
            order[j] = to;
          }
        }
        __syncthreads();
      }
  }
  if (threadIdx.x != 0) return;
  const double smax = s[order[0]];
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) total += exp(static_cast<double>(s[order[i]]) - smax);
  if (p.top_p < 1.0f) {
    const double want = static_cast<double>(p.top_p) * total;
    double run = 0.0;
    int32_t m = 0;
    while (m < keep) {
      run += exp(static_cast<double>(s[order[m++]]) - smax);
      if (run >= want) break;
    }
    keep = m > 1 ? m : 1;
    total = run;
  }
  const double target = counter_uniform(p.seed, p.frame, static_cast<uint64_t>(codebook)) * total;
  double run = 0.0;
  int32_t pick = order[keep - 1];
  for (int32_t i = 0; i < keep; ++i) {
    run += exp(static_cast<double>(s[order[i]]) - smax);
    if (run > target) {
      pick = order[i];
      break;
    }
  }
  ids[r * stride] = pick;
}

// Vocabularies beyond kMaxSampleVocab (no model samples one; the contract's guard check does):
// the non-finite check and the greedy arg-max straight from global memory, kWideSlices blocks per
// row, each slice's (any non-finite, first candidate) into `part`, then one thread per row merges
// the slices (the arg-max under a total order does not depend on the merge order).
constexpr int kWideSlices = 128;

__global__ void sample_wide_slice_kernel(const float* __restrict__ logits, int64_t vocab,
                                         float* __restrict__ part_value,
                                         int32_t* __restrict__ part_index) {
  pdl_entry();
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  __shared__ int any_bad;
  const int64_t r = blockIdx.x;
  const float* l = logits + r * vocab;
  if (threadIdx.x == 0) any_bad = 0;
  __syncthreads();
  const int64_t per = (vocab + kWideSlices - 1) / kWideSlices;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * per;
  const int64_t i1 = i0 + per < vocab ? i0 + per : vocab;
  bool bad = false;
  float bs = 0.0f;
  int32_t bi = -1;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    bad |= !isfinite(l[i]);
    if (before(l[i], static_cast<int32_t>(i), bs, bi)) {
      bs = l[i];
      bi = static_cast<int32_t>(i);
    }
  }
  if (bad) any_bad = 1;
  warp_first(bs, bi);
  if (threadIdx.x % 32 == 0) {
    sv[threadIdx.x / 32] = bs;
    si[threadIdx.x / 32] = bi;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
    if (before(sv[w], si[w], bs, bi)) {
      bs = sv[w];
      bi = si[w];
    }
  const int64_t at = r * kWideSlices + blockIdx.y;
  part_value[at] = bs;
  part_index[at] = any_bad ? -2 : bi;  // -2: a non-finite value in this slice
}

__global__ void sample_wide_merge_kernel(const float* __restrict__ part_value,
                                         const int32_t* __restrict__ part_index, int64_t n,
                                         const SampleRow* __restrict__ rows, int64_t codebook,
                                         int32_t* ids, int32_t* flags, int64_t stride) {
  pdl_entry();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  bool bad = false;
  float bs = 0.0f;
  int32_t bi = -1;
  for (int s = 0; s < kWideSlices; ++s) {
    const int32_t i = part_index[r * kWideSlices + s];
    bad |= i == -2;
    if (i >= 0 && before(part_value[r * kWideSlices + s], i, bs, bi)) {
      bs = part_value[r * kWideSlices + s];
      bi = i;
    }
  }
  if (bad) {
    ids[r * stride] = 0;
    if (flags[r * stride] == 0) flags[r * stride] = static_cast<int32_t>(codebook + 1);
    return;
  }
  // Only greedy rows are defined here (a sampled row of such a vocabulary gets id 0).
  ids[r * stride] = rows[r].temperature <= 0.0f ? bi : 0;
}

}  // namespace

int64_t sample_workspace_bytes(int64_t vocab, int64_t n) {
  return vocab > kMaxSampleVocab ? n * kWideSlices * 8 : 0;
}

void launch_sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                        int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride,
                        void* workspace, cudaStream_t stream) {
  if (n <= 0) return;
  if (vocab > kMaxSampleVocab) {
    // Greedy rows only (their parameters are on the device: checked there; a sampled row of such
    // a vocabulary gets id 0).
    float* part_value = static_cast<float*>(workspace);
    int32_t* part_index = reinterpret_cast<int32_t*>(part_value + n * kWideSlices);
    launch(sample_wide_slice_kernel, dim3(static_cast<unsigned>(n), kWideSlices), kThreads, 0,
           stream, logits, vocab, part_value, part_index);
    check_launch("sample_rows");
    launch(sample_wide_merge_kernel, blocks_for(n, kThreads), kThreads, 0, stream, part_value,
           part_index, n, rows, codebook, ids, flags, stride);
    check_launch("sample_rows");
    return;
  }
  int sort_size = 1;
  while (sort_size < vocab) sort_size *= 2;
  const int order_len = sort_size > kSortRounds ? sort_size : kSortRounds;
  const size_t shared = static_cast<size_t>(vocab) * sizeof(float) +
                        static_cast<size_t>(order_len) * sizeof(int32_t) +
                        static_cast<size_t>(sort_size) * sizeof(float) + static_cast<size_t>(vocab);
  if (shared > 48 * 1024)
    check(cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shared)),
          "cudaFuncSetAttribute");
  launch(sample_rows_kernel, static_cast<unsigned>(n), kThreads, shared, stream, logits, vocab,
         rows, codebook, ids, flags, stride, sort_size);
  check_launch("sample_rows");
}

void CudaBackend::sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                              int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride) {
  const int64_t bytes = sample_workspace_bytes(vocab, n);
  launch_sample_rows(logits, vocab, rows, n, codebook, ids, flags, stride,
                     bytes ? scratch(static_cast<size_t>(bytes)) : nullptr, stream_);
}

}  // namespace drama::cuda

#include "backend/cuda/moe.cuh"

#include <algorithm>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/linear_dot.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kMaxTopk = 64;

// One block of kRouteThreads per row. The exp terms are summed by one thread in increasing
// original id (so a pruned layer gives bitwise the probabilities of the unpruned one with -inf
// logits: adding +0 changes nothing); top-k is k rounds of a block-wide arg-max under the total
// order (higher probability, then lower original id), which picks the same experts in the same
// rank order as any correct selection.
constexpr int kRouteThreads = 128;

__global__ void route_topk_kernel(const float* __restrict__ logits, int64_t logit_stride,
                                  const int32_t* __restrict__ logit_column,
                                  const int32_t* __restrict__ original_id, int64_t n_stored,
                                  int64_t k, bool norm_topk, int32_t* __restrict__ expert_index,
                                  float* __restrict__ weight) {
  extern __shared__ float shared[];
  float* prob = shared;                                          // [n_stored]
  int32_t* by_id = reinterpret_cast<int32_t*>(prob + n_stored);  // stored index by id rank
  __shared__ float max_part[32];
  __shared__ float best_p[32];
  __shared__ int32_t best_s[32];
  __shared__ int32_t chosen[kMaxTopk];
  __shared__ float total;
  const int64_t r = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* l = logits + r * logit_stride;
  float max = -__int_as_float(0x7f800000);
  for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) {
    int64_t rank = 0;
    for (int64_t t = 0; t < n_stored; ++t) rank += original_id[t] < original_id[s];
    by_id[rank] = static_cast<int32_t>(s);
    max = fmaxf(max, l[logit_column[s]]);
  }
  max = block_max(max, max_part);  // synchronizes: by_id is complete
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n_stored; ++i) {
      const int32_t s = by_id[i];
      prob[s] = expf(l[logit_column[s]] - max);
      sum += prob[s];
    }
    total = sum;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) prob[s] /= total;
  __syncthreads();
  // a beats b: higher probability, or equal and lower original id (b < 0: nothing yet).
  auto better = [&](float pa, int32_t a, float pb, int32_t b) {
    return b < 0 || (a >= 0 && (pa > pb || (pa == pb && original_id[a] < original_id[b])));
  };
  for (int64_t j = 0; j < k; ++j) {
    float bp = 0.0f;
    int32_t bs = -1;
    for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= chosen[i] == s;
      if (!taken && better(prob[s], static_cast<int32_t>(s), bp, bs)) {
        bp = prob[s];
        bs = static_cast<int32_t>(s);
      }
    }
    for (int m = 16; m >= 1; m /= 2) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, m);
      const int32_t os = __shfl_xor_sync(0xffffffffu, bs, m);
      if (better(op, os, bp, bs)) {
        bp = op;
        bs = os;
      }
    }
    if (lane == 0) {
      best_p[warp] = bp;
      best_s[warp] = bs;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
        if (better(best_p[w], best_s[w], bp, bs)) {
          bp = best_p[w];
          bs = best_s[w];
        }
      chosen[j] = bs;
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float kept = 0.0f;
  for (int64_t j = 0; j < k; ++j) kept += prob[chosen[j]];
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

constexpr int kExpertWarps = 8;  // output columns per block of the expert kernels

// Workspace layout (int32 words first, then floats): order[pairs], start[n_stored + 1],
// active[n_stored], n_active[1], then act[pairs, inter] from the next multiple of 4 words.
struct MoeLayout {
  int32_t *order, *start, *active, *n_active;
  float* act;
};
__host__ __device__ inline MoeLayout moe_layout(float* workspace, int64_t pairs, int64_t n_stored) {
  int32_t* ints = reinterpret_cast<int32_t*>(workspace);
  MoeLayout m;
  m.order = ints;
  m.start = ints + pairs;
  m.active = m.start + n_stored + 1;
  m.n_active = m.active + n_stored;
  m.act = workspace + (pairs + 2 * n_stored + 2 + 3) / 4 * 4;
  return m;
}

// One block: counts per stored expert in shared memory, then warp 0 scans them (lane l owns a
// contiguous run of experts) into start[] and the list of chosen experts, then each expert's
// pairs are written in increasing pair order (row, then rank).
__global__ void moe_group_kernel(const int32_t* __restrict__ expert_index, int64_t pairs,
                                 int64_t n_stored, float* workspace) {
  extern __shared__ int32_t count[];  // [n_stored + 1]: counts, then starts
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) {
    int32_t c = 0;
    for (int64_t p = 0; p < pairs; ++p) c += expert_index[p] == s;
    count[s] = c;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int64_t run = (n_stored + 31) / 32, s0 = lane * run;
    const int64_t s1 = s0 + run < n_stored ? s0 + run : n_stored;
    int32_t total = 0, chosen = 0;
    for (int64_t s = s0; s < s1; ++s) {
      total += count[s];
      chosen += count[s] > 0;
    }
    int32_t total_before = total, chosen_before = chosen;  // inclusive scans over the lanes
    for (int d = 1; d < 32; d *= 2) {
      const int32_t t = __shfl_up_sync(0xffffffffu, total_before, d);
      const int32_t c = __shfl_up_sync(0xffffffffu, chosen_before, d);
      if (lane >= d) {
        total_before += t;
        chosen_before += c;
      }
    }
    total_before -= total;
    chosen_before -= chosen;
    for (int64_t s = s0; s < s1; ++s) {
      const int32_t c = count[s];
      m.start[s] = total_before;
      count[s] = total_before;
      if (c > 0) m.active[chosen_before++] = static_cast<int32_t>(s);
      total_before += c;
    }
    if (lane == 31) {
      m.start[n_stored] = total_before;
      *m.n_active = chosen_before;
    }
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) {
    int32_t at = count[s];
    for (int64_t p = 0; p < pairs; ++p)
      if (expert_index[p] == s) m.order[at++] = static_cast<int32_t>(p);
  }
}

// Rows `which[0..NW)` of expert e (0 gate, 1 up, 2 down) at output o against xs, into
// acc[w * kRowTile + rr].
template <WeightFormat Format, int NW>
__device__ __forceinline__ void expert_dots(const DeviceExpert& e, const int* which, int64_t o,
                                            int64_t in, const float* const* xs, int nr, bool vec_x,
                                            float* acc) {
  if constexpr (Format == WeightFormat::NVFP4) {
    const uint8_t* cr[NW];
    const uint8_t* sr[NW];
    for (int w = 0; w < NW; ++w) {
      cr[w] = static_cast<const uint8_t*>(e.data[which[w]]) + o * (in / 2);
      sr[w] = e.scales[which[w]] + o * (in / 16);
    }
    nvfp4_lane_dots<NW>(cr, sr, in, xs, nr, vec_x, acc);
  } else {
    for (int w = 0; w < NW; ++w)
      bf16_lane_dots(static_cast<const uint16_t*>(e.data[which[w]]) + o * in, in, xs, nr,
                     acc + w * kRowTile);
  }
}

// Grid (expert slot, column group); act[pair position, o] = silu(gate . x) * (up . x).
template <WeightFormat Format>
__global__ void moe_gate_up_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored,
                                   int64_t hidden, int64_t inter, const float* __restrict__ x,
                                   int64_t pairs, int64_t k, bool vec_x, float* workspace) {
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  const int slot = blockIdx.x;
  if (slot >= *m.n_active) return;
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kExpertWarps + threadIdx.x / 32;
  if (o >= inter) return;
  const int32_t s = m.active[slot];
  const DeviceExpert e = experts[s];
  const int64_t p0 = m.start[s], n = m.start[s + 1] - p0;
  for (int64_t i0 = 0; i0 < n; i0 += kRowTile) {
    const int nr = static_cast<int>(n - i0 < kRowTile ? n - i0 : kRowTile);
    const float* xs[kRowTile];
    for (int rr = 0; rr < kRowTile; ++rr)
      xs[rr] = x + (m.order[p0 + i0 + (rr < nr ? rr : 0)] / k) * hidden;
    float acc[2 * kRowTile] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int gate_up[2] = {0, 1};
    expert_dots<Format, 2>(e, gate_up, o, hidden, xs, nr, vec_x, acc);
    const float* g = acc;
    const float* u = acc + kRowTile;
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      float gs = warp_sum(g[rr]), us = warp_sum(u[rr]);
      if constexpr (Format == WeightFormat::NVFP4) {
        gs = gs * e.scale2[0];
        us = us * e.scale2[1];
      }
      if (lane == 0) m.act[(p0 + i0 + rr) * inter + o] = gs / (1.0f + expf(-gs)) * us;
    }
  }
}

// Grid (expert slot, column group); out[(r * out_slots + j), o] = down . act[pair].
template <WeightFormat Format>
__global__ void moe_down_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored,
                                int64_t hidden, int64_t inter, int64_t pairs, int64_t k,
                                int64_t out_slots, bool vec_x, float* workspace,
                                float* __restrict__ out) {
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  const int slot = blockIdx.x;
  if (slot >= *m.n_active) return;
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kExpertWarps + threadIdx.x / 32;
  if (o >= hidden) return;
  const int32_t s = m.active[slot];
  const DeviceExpert e = experts[s];
  const int64_t p0 = m.start[s], n = m.start[s + 1] - p0;
  for (int64_t i0 = 0; i0 < n; i0 += kRowTile) {
    const int nr = static_cast<int>(n - i0 < kRowTile ? n - i0 : kRowTile);
    const float* xs[kRowTile];
    for (int rr = 0; rr < kRowTile; ++rr) xs[rr] = m.act + (p0 + i0 + (rr < nr ? rr : 0)) * inter;
    float acc[kRowTile] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int down[1] = {2};
    expert_dots<Format, 1>(e, down, o, inter, xs, nr, vec_x, acc);
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      float sum = warp_sum(acc[rr]);
      if constexpr (Format == WeightFormat::NVFP4) sum = sum * e.scale2[2];
      const int64_t p = m.order[p0 + i0 + rr], r = p / k, j = p % k;
      if (lane == 0) out[(r * out_slots + j) * hidden + o] = sum;
    }
  }
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
  route_topk_kernel<<<static_cast<unsigned>(rows), kRouteThreads, shared, stream>>>(
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

int64_t moe_layout_floats(int64_t rows, int64_t k, int64_t inter, int64_t n_stored) {
  const int64_t pairs = rows * k;
  // act rows start on 16 bytes (the down product's float4 loads): round the int words up to 4.
  return (pairs + 2 * n_stored + 2 + 3) / 4 * 4 + pairs * inter;
}

void launch_moe_experts(const DeviceExpert* experts, WeightFormat format, int64_t n_stored,
                        int64_t hidden, int64_t inter, const float* x, int64_t rows,
                        const int32_t* expert_index, int64_t k, int64_t out_slots, float* out,
                        float* workspace, cudaStream_t stream) {
  const int64_t pairs = rows * k;
  if (pairs <= 0) return;
  moe_group_kernel<<<1, 256, static_cast<size_t>(n_stored + 1) * sizeof(int32_t), stream>>>(
      expert_index, pairs, n_stored, workspace);
  check_launch("moe_experts grouping");
  const unsigned slots = static_cast<unsigned>(pairs < n_stored ? pairs : n_stored);
  const unsigned threads = 32 * kExpertWarps;
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && hidden % 4 == 0;
  const bool vec_act = reinterpret_cast<uintptr_t>(workspace) % 16 == 0 && inter % 4 == 0;
  const dim3 grid_up(slots, blocks_for(inter, kExpertWarps)),
      grid_down(slots, blocks_for(hidden, kExpertWarps));
  if (format == WeightFormat::NVFP4) {
    moe_gate_up_kernel<WeightFormat::NVFP4><<<grid_up, threads, 0, stream>>>(
        experts, n_stored, hidden, inter, x, pairs, k, vec_x, workspace);
    check_launch("moe_experts gate/up");
    moe_down_kernel<WeightFormat::NVFP4><<<grid_down, threads, 0, stream>>>(
        experts, n_stored, hidden, inter, pairs, k, out_slots, vec_act, workspace, out);
  } else {
    moe_gate_up_kernel<WeightFormat::BF16><<<grid_up, threads, 0, stream>>>(
        experts, n_stored, hidden, inter, x, pairs, k, vec_x, workspace);
    check_launch("moe_experts gate/up");
    moe_down_kernel<WeightFormat::BF16><<<grid_down, threads, 0, stream>>>(
        experts, n_stored, hidden, inter, pairs, k, out_slots, vec_act, workspace, out);
  }
  check_launch("moe_experts down");
}

void CudaBackend::moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x,
                              int64_t rows, int64_t hidden, const int32_t* expert_index, int64_t k,
                              int64_t out_slots, float* out, float* workspace) {
  if (rows <= 0 || n_stored <= 0) return;
  const WeightFormat format = experts[0].gate.format;
  const int64_t inter = experts[0].gate.out;
  auto& table = expert_tables_[{experts, experts[0].gate.data}];
  if (!table) {
    std::vector<DeviceExpert> host(static_cast<size_t>(n_stored));
    for (int64_t s = 0; s < n_stored; ++s) {
      const LinearWeight* w[3] = {&experts[s].gate, &experts[s].up, &experts[s].down};
      for (int m = 0; m < 3; ++m) {
        if (w[m]->format != format || w[m]->out != (m < 2 ? inter : hidden))
          throw Error("CUDA moe_experts: every stored expert must share one format and shape");
        host[s].data[m] = w[m]->data;
        host[s].scales[m] = w[m]->scales;
        host[s].scale2[m] = w[m]->scale2;
      }
    }
    table = alloc(host.size() * sizeof(DeviceExpert));
    upload(table->data(), host.data(), host.size() * sizeof(DeviceExpert));
  }
  if (moe_layout_floats(rows, k, inter, n_stored) >
      Backend::moe_workspace_floats(rows, k, hidden, inter, n_stored))
    throw Error("CUDA moe_experts: the workspace layout outgrew Backend::moe_workspace_floats");
  launch_moe_experts(static_cast<const DeviceExpert*>(table->data()), format, n_stored, hidden,
                     inter, x, rows, expert_index, k, out_slots, out, workspace, stream_);
}

double time_moe_experts_graph(Backend& backend, const ExpertWeights* experts, int64_t n_stored,
                              const float* x, int64_t rows, int64_t hidden,
                              const int32_t* expert_index, int64_t k, int64_t out_slots, float* out,
                              float* workspace, int replays) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw Error("the grouped expert kernels need the CUDA backend, not " + backend.name());
  // Once outside the capture: the device table of the experts is made (an upload) on first use.
  cuda->moe_experts(experts, n_stored, x, rows, hidden, expert_index, k, out_slots, out, workspace);
  cuda->synchronize();
  cudaStream_t stream = cuda->stream();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cuda->moe_experts(experts, n_stored, x, rows, hidden, expert_index, k, out_slots, out, workspace);
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  std::vector<float> ms;
  for (int i = 0; i < replays + 3; ++i) {
    check(cudaEventRecord(t0, stream), "cudaEventRecord");
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaEventRecord(t1, stream), "cudaEventRecord");
    check(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float v = 0;
    check(cudaEventElapsedTime(&v, t0, t1), "cudaEventElapsedTime");
    if (i >= 3) ms.push_back(v);  // three warm-up replays
  }
  (void)cudaEventDestroy(t0);
  (void)cudaEventDestroy(t1);
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;
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

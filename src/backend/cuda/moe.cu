#include "backend/cuda/moe.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/linear_dot.cuh"
#include "backend/cuda/mma.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kMaxTopk = 64;

// One block of kRouteThreads per row. Every value has the bits of the plain sequential form: the
// exp terms are computed in parallel but summed by one thread in increasing original id (so a
// pruned layer gives bitwise the probabilities of the unpruned one with -inf logits: adding +0
// changes nothing); top-k is the total order (higher probability, then lower original id): an
// expert's rank is the number of experts that beat it, so each expert is ranked on its own and
// the k best land in rank order, the same experts in the same order as k rounds of an arg-max. A
// row holding NaN has no total order; it gets the first k stored experts (k distinct valid indices,
// weights NaN: the frame's non-finite flag reports it).
// The counts behind both ranks are split over kRouteLanes threads per expert (integer sums: any
// order gives the same count), so the block's longest loop is n_stored / kRouteLanes steps.
// The stored experts' columns and original ids are weights: they are read before the wait for the
// kernel before (pdl_entry), so only the logits' load is left after it. Stored experts already in
// increasing original id (every unpruned layer, and a pruned one that keeps the order) skip the
// count behind the id rank: an expert's rank by id is then its stored index. The k chosen weights
// are written by k threads, each summing the kept probabilities itself in rank order (the same
// bits in every thread).
constexpr int kRouteThreads = 1024;
constexpr int kRouteLanes = 8;
constexpr int kRouteGroups = kRouteThreads / kRouteLanes;

__global__ void route_topk_kernel(const float* __restrict__ logits, int64_t logit_stride,
                                  const int32_t* __restrict__ logit_column,
                                  const int32_t* __restrict__ original_id, int n_stored, int k,
                                  bool norm_topk, int32_t* __restrict__ expert_index,
                                  float* __restrict__ weight) {
  extern __shared__ float shared[];
  float* prob = shared;                                         // [n_stored] by stored index
  float* by_id = prob + n_stored;                               // [n_stored] exp terms by id rank
  int32_t* oid = reinterpret_cast<int32_t*>(by_id + n_stored);  // [n_stored] original ids
  __shared__ float max_part[32];
  __shared__ int32_t chosen[kMaxTopk];
  __shared__ float total;
  __shared__ int unordered;
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  // Weights first (before the wait): ids into shared memory, each thread's first column in a
  // register, and whether the ids it can see increase.
  int increasing = 1;
  for (int s = tid; s < n_stored; s += threads) {
    const int32_t id = original_id[s];
    oid[s] = id;
    if (s + 1 < n_stored && !(id < original_id[s + 1])) increasing = 0;
  }
  const int32_t first_column = tid < n_stored ? logit_column[tid] : 0;
  pdl_entry();
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * logit_stride;
  if (tid == 0) unordered = 0;
  if (tid < k) chosen[tid] = -1;
  float max = -__int_as_float(0x7f800000);
  for (int s = tid; s < n_stored; s += threads) {
    prob[s] = l[s == tid ? first_column : logit_column[s]];
    max = fmaxf(max, prob[s]);
  }
  increasing = __syncthreads_and(increasing);
  max = block_max(max, max_part);  // synchronizes: oid and the logits are in shared memory
  const int group = tid / kRouteLanes, sub = tid % kRouteLanes;
  // (The loop bounds are the same for the kRouteLanes threads of a group: the shuffles see them
  // all. n_stored rounded up to whole rounds of the groups keeps every group in every round.)
  const int rounds = (n_stored + kRouteGroups - 1) / kRouteGroups * kRouteGroups;
  float* terms = by_id;
  if (increasing) {
    terms = prob;  // the id rank is the stored index: the terms in place are in increasing id
    for (int s = tid; s < n_stored; s += threads) prob[s] = expf(prob[s] - max);
  } else {
    for (int s0 = group; s0 < rounds; s0 += kRouteGroups) {
      const bool valid = s0 < n_stored;
      const int32_t me = valid ? oid[s0] : 0;
      int rank = 0;
      if (valid)
        for (int t = sub; t < n_stored; t += kRouteLanes) rank += oid[t] < me;
      for (int w = kRouteLanes / 2; w >= 1; w /= 2)
        rank += __shfl_xor_sync(0xffffffffu, rank, w, kRouteLanes);
      if (valid && sub == 0) {
        const float e = expf(prob[s0] - max);
        prob[s0] = e;
        by_id[rank] = e;
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    // In increasing id; 16 terms are loaded before they are added.
    float sum = 0.0f;
    for (int i0 = 0; i0 < n_stored; i0 += 16) {
      float e[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) e[u] = i0 + u < n_stored ? terms[i0 + u] : 0.0f;
#pragma unroll
      for (int u = 0; u < 16; ++u)
        if (i0 + u < n_stored) sum += e[u];
    }
    total = sum;
  }
  __syncthreads();
  for (int s = tid; s < n_stored; s += threads) prob[s] /= total;
  __syncthreads();
  for (int s0 = group; s0 < rounds; s0 += kRouteGroups) {
    const bool valid = s0 < n_stored;
    const float p = valid ? prob[s0] : 0.0f;
    const int32_t me = valid ? oid[s0] : 0;
    int beaten_by = 0;
    if (valid)
      for (int t = sub; t < n_stored; t += kRouteLanes) {
        const float pt = prob[t];
        beaten_by += pt > p || (pt == p && oid[t] < me);
      }
    for (int w = kRouteLanes / 2; w >= 1; w /= 2)
      beaten_by += __shfl_xor_sync(0xffffffffu, beaten_by, w, kRouteLanes);
    if (valid && sub == 0) {
      if (p != p) unordered = 1;
      if (beaten_by < k) chosen[beaten_by] = s0;
    }
  }
  __syncthreads();
  if (tid >= k) return;
  // No total order: the first k stored experts, each once.
  const bool first_k = unordered != 0;
  float kept = 0.0f;
  for (int j = 0; j < k; ++j) kept += prob[first_k ? j : chosen[j]];
  const int32_t mine = first_k ? tid : chosen[tid];
  const int64_t at = static_cast<int64_t>(blockIdx.x) * k + tid;
  expert_index[at] = mine;
  weight[at] = norm_topk ? prob[mine] / kept : prob[mine];
}

// FromZero (expert_sum): the sum starts from `zero`, a 0.0f the compiler cannot fold away, so
// each term is added as expert_combine adds it to a zeroed y (fill then expert_combine, bitwise).
// AddToY (expert_sum_add, with FromZero): that sum is then added to y (y + sum, as add_kernel
// adds a scratch holding it).
template <bool FromZero, bool AddToY>
__global__ void expert_combine_kernel(const float* __restrict__ expert_out,
                                      const float* __restrict__ weight, int64_t rows, int64_t k,
                                      int64_t dim, float* y, float zero) {
  static_assert(FromZero || !AddToY);
  pdl_entry();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * dim) return;
  const int64_t r = t / dim, d = t % dim;
  float acc = FromZero ? zero : y[t];
  for (int64_t j = 0; j < k; ++j) acc += weight[r * k + j] * expert_out[(r * k + j) * dim + d];
  y[t] = AddToY ? y[t] + acc : acc;
}

// expert_sum_add then rms_norm in one launch (expert_sum_add_norm). The sums stay spread as
// expert_combine_kernel spreads them: block (b, r) of kRowNormThreads threads takes elements
// b * kRowNormThreads + t of row r, each element's sum expert_combine_kernel's with FromZero and
// AddToY (from `zero`, the k terms in rank order, then y + sum), so y gets expert_sum_add's bits.
// The last of a row's blocks to finish (last_to_finish on the row's counter, set back to 0 after)
// then normalises the row as rms_norm_kernel does: thread t squares elements t, t + 256, ... in
// float64 in increasing order (read back past L1; PerThread > 0: with the weights, at once, into
// registers, as rms_norm_kernel<PerThread>), block_sum's tree, inv_rms, (y * inv) * w, so yn gets
// rms_norm's bits. One launch where there were two, and no row's sums on one SM (a row's
// add and norm in one block a row measured slower on 2026-12-06: docs/cuda-backend.md, "Fewer
// launches, measured slower").
template <int PerThread>
__global__ void expert_sum_add_norm_kernel(const float* __restrict__ expert_out,
                                           const float* __restrict__ weight, int64_t k, int64_t dim,
                                           float* y, const uint16_t* __restrict__ w, float eps,
                                           float* yn, unsigned* __restrict__ counters, float zero) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.y;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float* yr = y + r * dim;
  pdl_entry();
  if (d < dim) {
    float acc = zero;
    for (int64_t j = 0; j < k; ++j) acc += weight[r * k + j] * expert_out[(r * k + j) * dim + d];
    yr[d] = yr[d] + acc;
  }
  if (!last_to_finish(counters + r, static_cast<int>(gridDim.x))) return;
  if (threadIdx.x == 0) counters[r] = 0;
  float* ynr = yn + r * dim;
  if constexpr (PerThread > 0) {
    // dim <= PerThread * blockDim: the row and the weights loaded at once, into registers.
    float v[PerThread], wv[PerThread];
#pragma unroll
    for (int i = 0; i < PerThread; ++i) {
      const int64_t e = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      v[i] = e < dim ? __ldcg(yr + e) : 0.0f;
      wv[i] = e < dim ? bf16_to_f32(w[e]) : 0.0f;
    }
    norm_row_in_registers(v, wv, dim, eps, scratch, ynr);
  } else {
    norm_row_reread([yr](int64_t e) { return __ldcg(yr + e); }, w, dim, eps, scratch, ynr);
  }
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

// The chosen expert of an expert kernel's block (grid x = slot): its stored index and its pairs
// p0 .. p0 + n in the grouped order; false for a slot past the chosen experts (the whole block
// returns). active[slot] is loaded beside n_active (slot < n_stored: in bounds, used only when
// active).
struct ChosenExpert {
  int32_t s;
  int64_t p0, n;
};
__device__ __forceinline__ bool chosen_expert(const MoeLayout& m, int slot, ChosenExpert& c) {
  const int32_t s = m.active[slot];
  if (slot >= *m.n_active) return false;
  c = {s, m.start[s], m.start[s + 1] - m.start[s]};
  return true;
}

// The outputs of pair position `at` (grouped order) at column o, written the same way by every
// version: act[at, o] = silu(gate) * up from the scaled gate and up sums; the down sum into
// out[(r * out_slots + j), o] for the pair's (row, rank).
__device__ __forceinline__ void store_act(const MoeLayout& m, int64_t at, int64_t inter, int64_t o,
                                          float gs, float us) {
  m.act[at * inter + o] = gs / (1.0f + expf(-gs)) * us;
}
__device__ __forceinline__ void store_down(const MoeLayout& m, int64_t at, int64_t k,
                                           int64_t out_slots, int64_t hidden, int64_t o, float v,
                                           float* out) {
  const int64_t p = m.order[at], r = p / k, j = p % k;
  out[(r * out_slots + j) * hidden + o] = v;
}

// Version 3 reads its activations split ahead of the kernel, once per row instead of in every
// block and warp: a row of n activations (n a multiple of 16) is n / 4 chunks of plane A, uint4
// {hi(x0, x1), hi(x2, x3), mid(x0, x1), mid(x2, x3)}, then n / 4 of plane B, uint2 {lo(x0, x1),
// lo(x2, x3)}: the three exact bfloat16 terms (mma.cuh's take_upper_halves) of inputs 4c .. 4c + 3
// as mma's B words, 6 n bytes a row (a multiple of 16: every chunk on its load's alignment).
__host__ __device__ inline uint4* split_a(uint32_t* base, int64_t row, int64_t n) {
  return reinterpret_cast<uint4*>(base + row * (3 * n / 2));
}
__host__ __device__ inline uint2* split_b(uint32_t* base, int64_t row, int64_t n) {
  return reinterpret_cast<uint2*>(base + row * (3 * n / 2) + n);
}
// store_act's value, written split (version 3's down product reads it so):
// element o of chunk o / 4, its hi and mid halves in plane A, its lo half in plane B.
__device__ __forceinline__ void store_act_split(uint32_t* acts, int64_t at, int64_t inter,
                                                int64_t o, float gs, float us) {
  float a = gs / (1.0f + expf(-gs)) * us;
  uint16_t term[3];
#pragma unroll
  for (int t = 0; t < 3; ++t) {
    const uint32_t u = __float_as_uint(a);
    term[t] = static_cast<uint16_t>(u >> 16);
    a -= __uint_as_float(u & 0xffff0000u);
  }
  uint16_t* plane_a = reinterpret_cast<uint16_t*>(split_a(acts, at, inter) + o / 4);
  uint16_t* plane_b = reinterpret_cast<uint16_t*>(split_b(acts, at, inter) + o / 4);
  plane_a[o % 4] = term[0];
  plane_a[4 + o % 4] = term[1];
  plane_b[o % 4] = term[2];
}

// One block: counts per stored expert in shared memory (integer atomics: the same counts in any
// order), then warp 0 scans them (lane l owns a contiguous run of experts) into start[] and the
// list of chosen experts, then warp 0 places the pairs 32 at a time in increasing pair order: a
// pair's place in its expert's run is the run's fill so far plus the lanes before it in the same
// 32 that chose the same expert (__match_any_sync). So each expert's pairs stay in increasing pair
// order (row, then rank), as the order of a serial pass gives them.
//
// Blocks after the first (version 3 with the split ahead only: xs not null) split the rows of x
// into xs as the version-3 kernels feed activations to mma (split_activations): rows x hidden / 4
// chunks, grid-strided.
__global__ void moe_group_kernel(const int32_t* __restrict__ expert_index, int64_t pairs,
                                 int64_t n_stored, float* workspace, const float* __restrict__ x,
                                 int64_t rows, int64_t hidden, bool vec_x, uint32_t* xs) {
  pdl_entry();
  if (blockIdx.x > 0) {
    const int64_t per_row = hidden / 4, chunks = rows * per_row;
    const int64_t stride = static_cast<int64_t>(gridDim.x - 1) * blockDim.x;
    for (int64_t c = static_cast<int64_t>(blockIdx.x - 1) * blockDim.x + threadIdx.x; c < chunks;
         c += stride) {
      const int64_t r = c / per_row, i = c % per_row;
      const float* p = x + r * hidden + 4 * i;
      const float4 v =
          vec_x ? *reinterpret_cast<const float4*>(p) : make_float4(p[0], p[1], p[2], p[3]);
      uint2 b;
      const uint4 a = split_activations(v, b);
      split_a(xs, r, hidden)[i] = a;
      split_b(xs, r, hidden)[i] = b;
    }
    return;
  }
  extern __shared__ int32_t count[];  // [n_stored + 1]: counts, then each run's fill
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  for (int64_t s = threadIdx.x; s < n_stored; s += blockDim.x) count[s] = 0;
  __syncthreads();
  // (An index outside the stored experts, which route_topk never writes, is left out, as the
  // serial count left it.)
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = expert_index[p];
    if (e >= 0 && e < n_stored) atomicAdd(count + e, 1);
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  {
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
  __syncwarp();
  // The pairs in steps of 32, in order; each step's expert indices are requested kGroupAhead steps
  // at a time, before the first of them is placed (one load latency for kGroupAhead steps, not one
  // a step: the placing was bound by it, 8.7 ns a pair, H100 2026-12-06 15:42). The same steps in
  // the same order, so the same order of pairs. Measured: 40.3 -> 37.2 us a layer at 512 rows
  // (H100 2026-12-06 18:03, results/decode-h100-1803.json): the placing's own work now bounds it.
  constexpr int kGroupAhead = 8;
  const unsigned before_me = (1u << lane) - 1u;
  for (int64_t b0 = 0; b0 < pairs; b0 += 32 * kGroupAhead) {
    int32_t ahead[kGroupAhead];
#pragma unroll
    for (int i = 0; i < kGroupAhead; ++i) {
      const int64_t p = b0 + 32 * i + lane;
      ahead[i] = p < pairs ? expert_index[p] : -1;
    }
#pragma unroll
    for (int i = 0; i < kGroupAhead; ++i) {
      const int64_t p = b0 + 32 * i + lane;
      int32_t e = ahead[i];
      if (e >= n_stored) e = -1;
      const unsigned same = __match_any_sync(0xffffffffu, e);
      const int32_t at = e >= 0 ? count[e] + __popc(same & before_me) : 0;
      __syncwarp();  // every lane has read its run's fill before the last lane of each group adds
      if (e >= 0) {
        m.order[at] = static_cast<int32_t>(p);
        if ((same >> lane) == 1u) count[e] += __popc(same);
      }
      __syncwarp();
    }
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
      bf16_lane_dots(static_cast<const uint16_t*>(e.data[which[w]]) + o * in, in, xs, nr, vec_x,
                     acc + w * kRowTile);
  }
}

// Grid (expert slot, column group); act[pair position, o] = silu(gate . x) * (up . x).
template <WeightFormat Format>
__global__ void moe_gate_up_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored,
                                   int64_t hidden, int64_t inter, const float* __restrict__ x,
                                   int64_t pairs, int64_t k, bool vec_x, float* workspace) {
  pdl_entry();
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  ChosenExpert chosen;
  if (!chosen_expert(m, blockIdx.x, chosen)) return;
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kExpertWarps + threadIdx.x / 32;
  if (o >= inter) return;
  const DeviceExpert e = experts[chosen.s];
  const int64_t p0 = chosen.p0, n = chosen.n;
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
      if (lane == 0) store_act(m, p0 + i0 + rr, inter, o, gs, us);
    }
  }
}

// Grid (expert slot, column group); out[(r * out_slots + j), o] = down . act[pair].
template <WeightFormat Format>
__global__ void moe_down_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored,
                                int64_t hidden, int64_t inter, int64_t pairs, int64_t k,
                                int64_t out_slots, bool vec_x, float* workspace,
                                float* __restrict__ out) {
  pdl_entry();
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  ChosenExpert chosen;
  if (!chosen_expert(m, blockIdx.x, chosen)) return;
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kExpertWarps + threadIdx.x / 32;
  if (o >= hidden) return;
  const DeviceExpert e = experts[chosen.s];
  const int64_t p0 = chosen.p0, n = chosen.n;
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
      if (lane == 0) store_down(m, p0 + i0 + rr, k, out_slots, hidden, o, sum, out);
    }
  }
}

// ---- Version 2 of the NVFP4 expert kernels (DRAMA_CUDA_EXPERTS=v2) ----
//
// Every output element gets the arithmetic of version 1 operation for operation: lane l of the
// column's warp sums its blocks b = l, l + 32, ... in increasing order, each block's 16 products
// with fmaf in input order from 0, then acc = fmaf(part, block scale * 2^14, acc); then the same
// warp_sum, scale_2 and SwiGLU. What changes is where the operands come from and how the work is
// laid out: a block owns Cols consecutive output columns of one chosen expert and copies their
// codes and block scales (contiguous bytes) into shared memory with cp.async, in Stages commit
// groups, before any arithmetic (no registers hold loads in flight, so a block has its whole
// weight tile requested at once); the activation rows of the tile are staged once per block in
// shared memory, 16-input blocks padded to 20 floats (float4 reads without bank conflicts); the
// weights stay in shared memory for every row tile of the expert. The tiling is fixed by the
// shapes, never by the row count.
constexpr int kV2Warps = 8;
constexpr int kV2Threads = 32 * kV2Warps;
constexpr int kXPad = 20;                   // floats per staged block of 16 inputs
constexpr int kUpCols = 16, kUpStages = 2;  // gate/up: columns per block, cp.async groups
constexpr int kDownCols = 32, kDownStages = 2;

// `len` bytes from global `src` to shared `dst`, by the whole block: 16-byte cp.async where both
// ends and the length allow, else 4-byte, else plain byte copies (visible after __syncthreads).
__device__ __forceinline__ void copy_to_shared(uint8_t* dst, const uint8_t* src, int64_t len) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src) |
                      static_cast<uintptr_t>(__cvta_generic_to_shared(dst)) |
                      static_cast<uintptr_t>(len);
  if (a % 16 == 0) {
    for (int64_t i = threadIdx.x; i < len / 16; i += blockDim.x)
      cp_async16(dst + 16 * i, src + 16 * i);
  } else if (a % 4 == 0) {
    for (int64_t i = threadIdx.x; i < len / 4; i += blockDim.x) cp_async4(dst + 4 * i, src + 4 * i);
  } else {
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
  }
}

// Rows row(0..nr) of `in` floats into sx: input i of row rr at sx[rr * (in / 16) * kXPad +
// (i / 16) * kXPad + i % 16]. vec: every row starts on 16 bytes (16-byte cp.async).
template <typename RowFn>
__device__ __forceinline__ void stage_rows(float* sx, int64_t in, int nr, bool vec, RowFn row) {
  const int64_t chunks = in / 4, xstride = in / 16 * kXPad;
  for (int64_t t = threadIdx.x; t < nr * chunks; t += blockDim.x) {
    const int rr = static_cast<int>(t / chunks);
    const int64_t c = t % chunks;
    float* d = sx + rr * xstride + (c / 4) * kXPad + (c % 4) * 4;
    const float* s = row(rr) + 4 * c;
    if (vec)
      cp_async16(d, s);
    else
      for (int q = 0; q < 4; ++q) d[q] = s[q];
  }
}

// nvfp4_lane_dots' arithmetic for NW weight rows staged in shared memory (codes cs[w], block
// scales ss[w]) against the staged rows sx[rr * xstride ...], rr < nr, into acc[w * kRowTile +
// rr]: the same lane owns the same blocks, summed in the same order with the same fmaf chain. One
// activation read serves all NW rows.
template <int NW>
__device__ __forceinline__ void nvfp4_lane_dots_shared(const uint8_t* const* cs,
                                                       const uint8_t* const* ss, int64_t blocks,
                                                       const float* sx, int64_t xstride, int nr,
                                                       float* acc) {
  const int lane = threadIdx.x % 32;
  for (int64_t b = lane; b < blocks; b += 32) {
    float s[NW];
    float wv[NW][16];
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      s[w] = e4m3_to_f32(ss[w][b]) * 16384.0f;
      nvfp4_expand(reinterpret_cast<const uint2*>(cs[w])[b], wv[w]);
    }
#pragma unroll
    for (int rr = 0; rr < kRowTile; ++rr) {
      if (rr >= nr) break;
      const float4* xb = reinterpret_cast<const float4*>(sx + rr * xstride + b * kXPad);
      float part[NW];
#pragma unroll
      for (int w = 0; w < NW; ++w) part[w] = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 xv = xb[q];
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          part[w] = fmaf(wv[w][4 * q], xv.x, part[w]);
          part[w] = fmaf(wv[w][4 * q + 1], xv.y, part[w]);
          part[w] = fmaf(wv[w][4 * q + 2], xv.z, part[w]);
          part[w] = fmaf(wv[w][4 * q + 3], xv.w, part[w]);
        }
      }
#pragma unroll
      for (int w = 0; w < NW; ++w)
        acc[w * kRowTile + rr] = fmaf(part[w], s[w], acc[w * kRowTile + rr]);
    }
  }
}

// Shared bytes of one v2 block: the staged rows, then the codes [NW][Cols][in / 2], then the
// block scales [NW][Cols][in / 16].
__host__ __device__ inline int64_t v2_shared_bytes(int nw, int cols, int64_t in, int tile_rows) {
  return tile_rows * (in / 16) * kXPad * 4 + nw * cols * (in / 2 + in / 16);
}

// Grid (expert slot, column block); rows go in tiles of tile_rows (1..kRowTile: min(rows,
// kRowTile), which sizes the staged activations; a tile never changes any element's arithmetic).
// NW == 2: gate and up (in = hidden, columns = inter),
// act[pair position, o] = silu(gate . x) * (up . x); NW == 1: down (in = inter, columns =
// hidden), out[(r * out_slots + j), o] = down . act[pair].
// Blocks per SM the registers leave room for (ptxas, sm_90a: gate/up 79 registers with 3, no
// spills; 4 would cap it at 64 and spill; down 62 with 4).
template <int NW, int Cols, int Stages>
__global__ void __launch_bounds__(kV2Threads, NW == 2 ? 3 : 4)
    moe_nvfp4_v2_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored, int64_t hidden,
                        int64_t inter, const float* __restrict__ x, int64_t pairs, int64_t k,
                        int64_t out_slots, int tile_rows, bool vec_x, float* workspace,
                        float* __restrict__ out) {
  pdl_entry();
  extern __shared__ __align__(16) uint8_t smem[];
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  ChosenExpert chosen;
  if (!chosen_expert(m, blockIdx.x, chosen)) return;  // the whole block
  const int64_t in = NW == 2 ? hidden : inter, columns = NW == 2 ? inter : hidden;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * Cols;
  const int ncols = static_cast<int>(columns - o0 < Cols ? columns - o0 : Cols);
  const DeviceExpert e = experts[chosen.s];
  const int64_t p0 = chosen.p0, n = chosen.n;
  const int64_t blocks = in / 16, xstride = blocks * kXPad, row_bytes = in / 2;
  float* sx = reinterpret_cast<float*>(smem);
  uint8_t* scodes = smem + static_cast<int64_t>(tile_rows) * xstride * 4;
  uint8_t* sscales = scodes + NW * Cols * row_bytes;
  const int first[2] = {NW == 2 ? 0 : 2, 1};
  auto row = [&](int64_t i0, int rr) -> const float* {
    if constexpr (NW == 2) return x + (m.order[p0 + i0 + rr] / k) * hidden;
    return m.act + (p0 + i0 + rr) * inter;
  };
  // The first row tile's activations and the first stage of weights in commit group 0, each
  // further stage in its own group: everything this block reads is requested before any wait.
  constexpr int per_stage = Cols / Stages;
  static_assert(Cols % Stages == 0, "stages split the columns evenly");
  // The weights go first: their addresses need only the expert, the rows' need the pair order.
  for (int st = 0; st < Stages; ++st) {
    const int c0 = st * per_stage, c1 = c0 + per_stage < ncols ? c0 + per_stage : ncols;
    if (c1 > c0)
      for (int w = 0; w < NW; ++w) {
        const int mat = first[w];
        copy_to_shared(scodes + (w * Cols + c0) * row_bytes,
                       static_cast<const uint8_t*>(e.data[mat]) + (o0 + c0) * row_bytes,
                       (c1 - c0) * row_bytes);
        copy_to_shared(sscales + (w * Cols + c0) * blocks, e.scales[mat] + (o0 + c0) * blocks,
                       (c1 - c0) * blocks);
      }
    if (st == 0)
      stage_rows(sx, in, static_cast<int>(n < tile_rows ? n : tile_rows), vec_x,
                 [&](int rr) { return row(0, rr); });
    cp_async_commit();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t i0 = 0; i0 < n; i0 += tile_rows) {
    const int nr = static_cast<int>(n - i0 < tile_rows ? n - i0 : tile_rows);
    if (i0 > 0) {
      __syncthreads();  // every warp is done with the previous tile's rows
      stage_rows(sx, in, nr, vec_x, [&](int rr) { return row(i0, rr); });
      cp_async_commit();
      cp_async_wait(0);
    }
    for (int st = 0; st < Stages; ++st) {
      if (i0 == 0) cp_async_wait(Stages - 1 - st);
      __syncthreads();
      const int c1 = (st + 1) * per_stage < ncols ? (st + 1) * per_stage : ncols;
      for (int c = st * per_stage + warp; c < c1; c += kV2Warps) {
        const int64_t o = o0 + c;
        float acc[NW * kRowTile];
#pragma unroll
        for (int i = 0; i < NW * kRowTile; ++i) acc[i] = 0.0f;
        const uint8_t* cs[NW];
        const uint8_t* ss[NW];
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          cs[w] = scodes + (w * Cols + c) * row_bytes;
          ss[w] = sscales + (w * Cols + c) * blocks;
        }
        nvfp4_lane_dots_shared<NW>(cs, ss, blocks, sx, xstride, nr, acc);
#pragma unroll
        for (int rr = 0; rr < kRowTile; ++rr) {
          if (rr >= nr) break;
          if constexpr (NW == 2) {
            float gs = warp_sum(acc[rr]), us = warp_sum(acc[kRowTile + rr]);
            gs = gs * e.scale2[0];
            us = us * e.scale2[1];
            if (lane == 0) store_act(m, p0 + i0 + rr, inter, o, gs, us);
          } else {
            float sum = warp_sum(acc[rr]);
            sum = sum * e.scale2[2];
            if (lane == 0) store_down(m, p0 + i0 + rr, k, out_slots, hidden, o, sum, out);
          }
        }
      }
    }
  }
}

// ---- Version 3 of the NVFP4 expert kernels (DRAMA_CUDA_EXPERTS=v3): tensor cores ----
//
// The products of version 2 on mma.sync (mma.cuh): each weight is its E2M1 code times its block
// scale as a bfloat16 (exact), each activation three bfloat16 terms (exact), float32 accumulation
// (the hi terms in one accumulator, mid and lo in another), the sum times scale_2, then SwiGLU as
// version 2 writes it. The block of (chosen expert, 16 output columns) takes the expert's pairs
// in tiles of 8 (mma's B columns); the reduction is cut into groups of 128 inputs, lane (g, t)
// holding inputs 128 q + 32 t .. + 31 of its rows (16 code bytes, 2 block scales, 32
// activations: step s of the group uses inputs 128 q + 32 t + 4 s .. + 3, the same map for A and
// B), and the groups into at most kV3MaxSlices contiguous slices, one warp each, summed in slice
// order. Slices, groups and tiles are fixed by the shapes alone, so a pair's bits are the same
// whatever other pairs share its expert or its batch. Not the arithmetic of versions 1 and 2.
constexpr int kV3MaxSlices = 8;
constexpr int kV3Cols = 16;

struct V3Split {
  int slices;
  int64_t groups_per_slice;
};
V3Split v3_split(int64_t in) {
  const int64_t groups = (in + 127) / 128;
  int64_t slices = groups < kV3MaxSlices ? groups : kV3MaxSlices;
  const int64_t per = (groups + slices - 1) / slices;
  slices = (groups + per - 1) / per;
  return {static_cast<int>(slices), per};
}

// Codes of inputs kb .. kb + 31 of a row (two 8-byte halves) and its two block scales' bytes,
// zeros where the row is not valid or past in. Every load reads an address in bounds (input 0 of
// the row in place of the others) and the zeros are selected after it, with no branch: so a
// warp's loads of all its rows are issued before any of them is used. (The form before decoded
// each scale inside its own branch right after its load, and gate/up's most stalled instruction
// was that decode: Nsight Compute, H100 2026-12-07 09:25. Loading the weights first made batch 1
// x0.984 and paired x0.962; making the activation loads branch-free too, with their zeros
// selected, cost more selects than it saved: results/decode-v3-loads-h100-0932.json.)
// Whole (moe_nvfp4_v3_kernel's): every row valid and every input inside in, no selects.
template <bool Whole>
__device__ __forceinline__ void v3_load(const uint8_t* codes, const uint8_t* scales, int64_t in,
                                        int64_t kb, bool valid, uint32_t (&w)[4],
                                        uint32_t (&raw)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t k = kb + 16 * h;
    const bool ok = Whole || (valid && k < in);
    const int64_t at = ok ? k : 0;
    const uint2 c = __ldg(reinterpret_cast<const uint2*>(codes + at / 2));
    const uint32_t b = __ldg(scales + at / 16);
    w[2 * h] = ok ? c.x : 0u;
    w[2 * h + 1] = ok ? c.y : 0u;
    raw[h] = ok ? b : 0u;
  }
}

// Three blocks an SM (ptxas, sm_90a, 2026-12-07: gate/up 80 registers with 68 bytes of spills,
// down 80 and none; without the bound 126 and 94, two blocks): at one row the 384 gate/up blocks of
// 8 experts then fit one wave of the H200's 132 SMs. On the H200 (2026-12-04 18:43, against 18:27)
// the graphed step took 4.853 ms at one row against 5.007 and 29.43 at 64 rows against 32.67, the
// same bits (results/decode-h200-1843.json).
//
// Ahead (the default): the activations come split (xs, acts: split_a); otherwise (set_split_ahead
// false, for the test that the split ahead changes no bit) the kernel reads them as floats (x,
// act) and splits them itself, as before 2026-12-05.
//
// Whole (Ahead only; launch_moe_experts takes it for gate/up where the shapes allow: inputs in
// whole groups of 128, output columns in whole blocks of 16, as at bench-30b-a3b's 2048 x 768): no
// load is checked against in or the columns, and a column of B past the expert's pairs reads the
// last pair's row (it feeds only its own column of D, whose pair is never stored): the loads need
// no branch and no select. The same values where they are used: the same bits.
//
// NT (down only, NW 1): column tiles of 16 a block. At 2, each warp takes two tiles of down's
// columns as gate/up takes its two matrices: both tiles' loads issued together, each tile's mma
// into its own accumulators. A column's products, slices and sums are the single tile's: the same
// bits. Why: at one row down's 8 experts x 128 tiles were 1024 blocks of 6 warps, four blocks an
// SM at 80 registers, so two waves on 132 SMs; at two tiles a block, 512 blocks: one. Measured
// (H100 2026-12-08 01:11, results/decode-v3-down-tiles-h100-0111.json): down timed alone at one
// row 12.7 -> 11.6 us, paired 19.4 -> 17.0, 8 rows 53.8 -> 42.1, 64 rows 153.2 -> 110.1; the
// graphed step x0.992 at one row, x0.975 paired, x0.943 at 8 rows, x0.922 at 64.
template <int NW, bool Ahead, bool Whole = false, int NT = 1>
__global__ void __launch_bounds__(32 * kV3MaxSlices, 3)
    moe_nvfp4_v3_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored, int64_t hidden,
                        int64_t inter, const float* __restrict__ x, bool vec_x,
                        uint32_t* __restrict__ xs, int64_t pairs, int64_t k, int64_t out_slots,
                        int64_t groups_per_slice, uint32_t* __restrict__ acts, float* workspace,
                        float* __restrict__ out) {
  static_assert(Ahead || !Whole, "whole loads read the activations split ahead");
  static_assert(NT == 1 || NW == 1, "two column tiles a block: down only");
  // The warp's weight streams: gate and up (NW 2), or down's NT column tiles.
  constexpr int S = NW * NT;
  pdl_entry();
  __shared__ float partial[kV3MaxSlices][S][8][kV3Cols + 1];
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  ChosenExpert chosen;
  if (!chosen_expert(m, blockIdx.x, chosen)) return;  // the whole block
  const int64_t in = NW == 2 ? hidden : inter, columns = NW == 2 ? inter : hidden;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kV3Cols * NT;
  const DeviceExpert e = experts[chosen.s];
  const int64_t p0 = chosen.p0, n = chosen.n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, slices = blockDim.x / 32;
  const int g = lane >> 2, t = lane & 3;
  const int first[2] = {NW == 2 ? 0 : 2, 1};
  const int64_t groups = (in + 127) / 128;
  const int64_t q0 = warp * groups_per_slice;
  const int64_t q1 = q0 + groups_per_slice < groups ? q0 + groups_per_slice : groups;
  // Weight rows o0 + g and o0 + g + 8 of each matrix, or of each column tile (o0 + 16 w + ...),
  // (codes, scales), when they exist.
  const uint8_t* codes[S][2];
  const uint8_t* scl[S][2];
  bool valid[S][2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int w = 0; w < S; ++w) {
      const int64_t o = o0 + (NW == 2 ? 0 : kV3Cols * w) + g + 8 * h;
      const int mat = first[NW == 2 ? w : 0];
      valid[w][h] = o < columns;
      codes[w][h] = static_cast<const uint8_t*>(e.data[mat]) + (valid[w][h] ? o : 0) * (in / 2);
      scl[w][h] = e.scales[mat] + (valid[w][h] ? o : 0) * (in / 16);
    }
  for (int64_t i0 = 0; i0 < n; i0 += 8) {
    // B column g: pair p0 + i0 + g (its x row split, or its act row split for down).
    const bool has_row = i0 + g < n;
    const uint4* row_a = nullptr;
    const uint2* row_b = nullptr;
    const float* xrow = nullptr;
    if (has_row || Whole) {
      const int64_t at = p0 + (has_row ? i0 + g : n - 1);
      const int64_t row = NW == 2 ? m.order[at] / k : at;
      if constexpr (Ahead) {
        row_a = split_a(NW == 2 ? xs : acts, row, in);
        row_b = split_b(NW == 2 ? xs : acts, row, in);
      } else {
        xrow = NW == 2 ? x + row * hidden : m.act + row * inter;
      }
    }
    float acc[S][4], acc_low[S][4];
#pragma unroll
    for (int w = 0; w < S; ++w)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[w][q] = acc_low[w][q] = 0.0f;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t kb = 128 * q + 32 * t;
      // Every row's loads first, then the scales' decode (a zero byte decodes to zero).
      uint32_t wc[S][2][4], sc[S][2][2];
#pragma unroll
      for (int w = 0; w < S; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          v3_load<Whole>(codes[w][h], scl[w][h], in, kb, valid[w][h], wc[w][h], sc[w][h]);
#pragma unroll
      for (int w = 0; w < S; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) sc[w][h][e] = e4m3_bf16x2(static_cast<uint8_t>(sc[w][h][e]));
            // The activation terms, split ahead (chunk kb / 4 + s of the row), four steps at a time
            // (all eight at once spill: 324 bytes for gate/up, 68 for down, sm_90a).
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint4 va[4];
        uint2 vb[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int64_t kk = kb + 4 * (4 * half + u);
          if constexpr (Whole) {
            va[u] = row_a[kk / 4];
            vb[u] = row_b[kk / 4];
          } else if (!has_row || kk >= in) {
            va[u] = make_uint4(0, 0, 0, 0);
            vb[u] = make_uint2(0, 0);
          } else if constexpr (Ahead) {
            va[u] = row_a[kk / 4];
            vb[u] = row_b[kk / 4];
          } else {
            const float4 v = vec_x
                                 ? *reinterpret_cast<const float4*>(xrow + kk)
                                 : make_float4(xrow[kk], xrow[kk + 1], xrow[kk + 2], xrow[kk + 3]);
            va[u] = split_activations(v, vb[u]);
          }
        }
#pragma unroll
        // Every lane runs all 8 steps (mma.sync needs the whole warp): inputs past `in` are zero
        // codes and zero activations, which add exact zeros.
        for (int u = 0; u < 4; ++u) {
          const int s = 4 * half + u;
          const uint32_t b[3][2] = {{va[u].x, va[u].y}, {va[u].z, va[u].w}, {vb[u].x, vb[u].y}};
#pragma unroll
          for (int w = 0; w < S; ++w) {
            // Codes 4s .. 4s + 3 of the lane's 32: word s / 2, half s % 2; block scale s / 4.
            uint32_t a[4];
            e2m1x4_times_scale(wc[w][0][s / 2], s % 2, sc[w][0][s / 4], a[0], a[2]);
            e2m1x4_times_scale(wc[w][1][s / 2], s % 2, sc[w][1][s / 4], a[1], a[3]);
            mma_bf16(acc_low[w], a, b[2][0], b[2][1]);
            mma_bf16(acc_low[w], a, b[1][0], b[1][1]);
            mma_bf16(acc[w], a, b[0][0], b[0][1]);
          }
        }
      }
    }
    // Lane (g, t) holds D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]: column g (+ 8) of
    // the block, pair i0 + 2t (+ 1) of the tile.
    __syncthreads();  // the previous tile's partials have been read
#pragma unroll
    for (int w = 0; w < S; ++w)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        partial[warp][w][2 * t + (q & 1)][g + 8 * (q >> 1)] = acc[w][q] + acc_low[w][q];
    __syncthreads();
    // Down: column cc of the block's NT tiles is column cc % 16 of tile cc / 16.
    for (int el = threadIdx.x; el < 8 * kV3Cols * NT; el += blockDim.x) {
      const int rr = el / (kV3Cols * NT), cc = el % (kV3Cols * NT);
      const int c = cc % kV3Cols, tile = cc / kV3Cols;
      const int64_t o = o0 + cc;
      if (i0 + rr >= n || o >= columns) continue;
      float sum[NW];
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const int stream = NW == 2 ? w : tile;
        sum[w] = partial[0][stream][rr][c];
        for (int sl = 1; sl < slices; ++sl) sum[w] += partial[sl][stream][rr][c];
      }
      if constexpr (NW == 2 && Ahead)
        store_act_split(acts, p0 + i0 + rr, inter, o, sum[0] * e.scale2[0], sum[1] * e.scale2[1]);
      else if constexpr (NW == 2)
        store_act(m, p0 + i0 + rr, inter, o, sum[0] * e.scale2[0], sum[1] * e.scale2[1]);
      else
        store_down(m, p0 + i0 + rr, k, out_slots, hidden, o, sum[0] * e.scale2[2], out);
    }
  }
}

// ---- Version 3, wide layout: the same bits, for experts with many pairs ----
//
// moe_nvfp4_v3_kernel's arithmetic, laid out for steps where an expert has many pairs (the
// lanes of a busy server): a block owns (chosen expert, kWideCols output columns), each warp 16
// of them (one A tile per matrix) over the whole reduction. The warp runs v3's slices one after
// the other, each from zero in v3's group and step order, and adds each slice's sum (acc +
// acc_low, as v3 writes its partials) to a running total in slice order, slice 0's sum being the
// start: the additions of v3's partial[0] + partial[1] + ..., so every output has v3's bits (and
// the bits do not depend on which layout ran: wide_layout() picks it, and tests/model/
// test_cuda_parity.cpp checks the two equal). No cross-warp reduction. The expert's pairs go in
// passes of 8 Tiles pairs; for every 128-input group of a pass the block stages its
// columns' codes and block scales and the pass's activations in shared memory (cp.async,
// kWideStages chunks in flight), and a warp decodes each weight fragment once for all the pass's
// pair tiles. Version 3's own layout re-reads and re-decodes the weights for every tile of 8 pairs
// and holds a few loads in flight per warp.
constexpr int kWideWarps = 8;
constexpr int kWideCols = 16 * kWideWarps;
// Pair tiles of 8 a pass (Tiles): 2, or where the experts average at least kWide4TilePairs pairs,
// 4 (a pass of 32 pairs: at 26-32 pairs an expert, 416-512 rows, each weight decoded once, not
// twice). Gate/up at 4 tiles: 236 registers, one block an SM; H100, 2026-12-06 13:54, each kernel
// timed alone in one call (results/decode-gateup32-h100-1354.json beside decode-h100-1354.json):
// gate/up at 512 rows 475 against 537 us. Down at 4 tiles at every row count was slower then (367
// against 303 us at 512 rows, 215 against 146 at 192: 48 bytes of spills, and a pass staging 32
// pairs' activations where 192 rows fill 12); with a pass's rows as row numbers and its copies
// found once a block it has 128 registers and no spills (ptxas sm_90a), so it takes 4 tiles where
// gate/up does: 277 against 293 us at 512 rows, H100 2026-12-06 15:58
// (results/decode-h100-1558.json beside decode-before-down4-h100-1558.json; below 24 pairs it is
// the same kernel as before).
constexpr int kWide4TilePairs = 24;
constexpr int kWideStages = 3;
// The pass's activations arrive split (split_a); a stage holds a group's plane-A words laid out
// as the floats were before (16 bytes for 4 inputs: runs of 8 chunks padded to 144 bytes, so the
// four t lanes of a quarter warp read distinct banks) and its plane-B words beside them (8 bytes
// for 4 inputs, runs padded to 72 bytes: the 16 lanes of a half warp's 8-byte reads, 4 pairs x 4
// runs, land on 16 distinct 8-byte slots of the 128).
constexpr int kWideLaneRun = 36;                // plane-A words per staged run of 32 inputs (4 pad)
constexpr int kWideXStride = 4 * kWideLaneRun;  // plane-A words per staged pair of a group
constexpr int kWideLaneRunB = 18;               // plane-B words per run (2 pad)
constexpr int kWideXStrideB = 4 * kWideLaneRunB;  // plane-B words per staged pair of a group

// DRAMA_CUDA_WIDE_ROWS: unset or empty, the wide layout where the experts average at least 12
// pairs (rows x k >= 12 x n_stored: from 192 rows at bench-30b-a3b's 128 experts, top 8; on the
// H200 one layer's products ran 0.90x as fast as in version 3's own layout at 8 pairs an expert
// and 1.45x as fast at 12: results/decode-h200-1821.json); N > 0, from N rows on; 0, never.
// Held as -1 for the first.
std::atomic<int64_t> g_wide_rows{[] {
  const char* v = std::getenv("DRAMA_CUDA_WIDE_ROWS");
  return v && *v ? std::atoll(v) : int64_t{-1};
}()};

// Whether version 3's own layout reads its activations split ahead (the default; false only for
// the test that the split ahead changes no bit: set_split_ahead).
std::atomic<bool> g_split_ahead{true};

// Column tiles of 16 a block of version 3's own down (moe_nvfp4_v3_kernel's NT; the same bits):
// DRAMA_CUDA_V3_DOWN_TILES=1 or 2 (unset or empty: 2); set_v3_down_tiles.
int down_tiles_of(const char* v) {
  const std::string s = v ? v : "";
  return s.empty() || s == "2" ? 2 : s == "1" ? 1 : 0;
}
std::atomic<int> g_v3_down_tiles{[] {
  const int n = down_tiles_of(std::getenv("DRAMA_CUDA_V3_DOWN_TILES"));
  return n == 0 ? 2 : n;  // refused with the backend: check_experts_environment
}()};

bool wide_layout(int64_t rows, int64_t k, int64_t n_stored) {
  const int64_t w = g_wide_rows.load(std::memory_order_relaxed);
  return w < 0 ? rows * k >= 12 * n_stored : w > 0 && rows >= w;
}

// Bytes of one stage: codes [NW][kWideCols][64], block scales [NW][kWideCols][8], activations
// [8 tiles][kWideXStride] plane-A words and [8 tiles][kWideXStrideB] plane-B words.
__host__ __device__ constexpr int64_t wide_stage_bytes(int nw, int tiles) {
  return nw * kWideCols * (64 + 8) + 8 * tiles * (kWideXStride + kWideXStrideB) * 4;
}

// Whole (launch_moe_experts: every stored expert's codes and block scales on 16 bytes, as
// prepare_experts records in ExpertTable::on16, and hidden and intermediate sizes multiples of
// 128): every chunk of every row is whole and on 16 bytes, and
// every column of every block exists, so a block stages its codes 16 bytes a copy and its scales 8
// with no test of alignment, length or column. The general form also copies byte by byte where a
// piece is not on 8 bytes; that copy, never taken at bench-30b-a3b, still cost the gate/up kernel
// 7.4 million predicated-off byte loads and their stores at 192 rows, and a fifth of its stall
// samples waited at those stores (Nsight Compute source counters, H100, 2026-12-06 09:16,
// results/ncu-source-rows192-h100-0916.json).
template <int NW, bool Whole, int Tiles>
__global__ void __launch_bounds__(32 * kWideWarps, NW == 2 && Tiles == 4 ? 1 : 2)
    moe_nvfp4_v3_wide_kernel(const DeviceExpert* __restrict__ experts, int64_t n_stored,
                             int64_t hidden, int64_t inter, uint32_t* __restrict__ xs,
                             int64_t pairs, int64_t k, int64_t out_slots, int64_t groups_per_slice,
                             uint32_t* __restrict__ acts, float* workspace,
                             float* __restrict__ out) {
  constexpr int kWideTiles = Tiles, kWidePairs = 8 * kWideTiles;
  pdl_entry();
  extern __shared__ __align__(16) uint8_t smem[];
  const MoeLayout m = moe_layout(workspace, pairs, n_stored);
  ChosenExpert chosen;
  if (!chosen_expert(m, blockIdx.x, chosen)) return;  // the whole block
  const int64_t in = NW == 2 ? hidden : inter, columns = NW == 2 ? inter : hidden;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kWideCols;
  const DeviceExpert e = experts[chosen.s];
  const int64_t p0 = chosen.p0, n = chosen.n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, t = lane & 3;
  const int first[2] = {NW == 2 ? 0 : 2, 1};
  const int64_t groups = (in + 127) / 128, passes = (n + kWidePairs - 1) / kWidePairs;
  const int64_t chunks = passes * groups;
  constexpr int64_t stage_bytes = wide_stage_bytes(NW, Tiles);
  const int64_t code_row = in / 2, scale_row = in / 16;
  bool codes8 = code_row % 8 == 0, scales8 = scale_row % 8 == 0;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    codes8 = codes8 && reinterpret_cast<uintptr_t>(e.data[first[w]]) % 8 == 0;
    scales8 = scales8 && reinterpret_cast<uintptr_t>(e.scales[first[w]]) % 8 == 0;
  }
  // A thread stages the same kPassShare of a pass's (pair, 4-input chunk) slots in every chunk:
  // pair (threadIdx.x + 256 s) / 32 of the pass, chunk threadIdx.x % 32 of the group. Their split
  // rows (x's for gate/up, act's for down) are found once a pass (a load of the grouped order and a
  // division each), not once a chunk, and held as row numbers, not two pointers each (gate/up at
  // 192 rows 251 against 266 us, H100 2026-12-06 13:54:
  // results/decode-passes-fragments-h100-1354.json).
  constexpr int kPassShare = kWidePairs * 32 / (32 * kWideWarps);
  int32_t share_row[kPassShare];
  // Whole: a thread's code copies of a chunk (rows threadIdx.x / 4 + 64 i of the block's columns,
  // piece threadIdx.x % 4) and its scale copy (row threadIdx.x, below kWideCols) are the same in
  // every chunk; their sources are found once here, not in every chunk (a 64-bit product a copy),
  // and a chunk adds its own offset. The same bytes in the same places, so the same bits. Gate/up
  // 474 -> 450 us and down 304 -> 293 at 512 rows, H100 2026-12-06 15:42
  // (results/decode-hoist-experts-h100-1542.json beside decode-hoist-linear-h100-1542.json).
  constexpr int kCodeRowStep = 32 * kWideWarps / 4, kCodePieces = kWideCols / kCodeRowStep;
  static_assert(kWideCols % kCodeRowStep == 0);
  const int code_r = threadIdx.x / 4, code_piece = threadIdx.x % 4;
  const int64_t code_step = kCodeRowStep * code_row;
  const uint8_t* code_src[NW];
  const uint8_t* scale_src[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    code_src[w] =
        static_cast<const uint8_t*>(e.data[first[w]]) + (o0 + code_r) * code_row + 16 * code_piece;
    scale_src[w] = e.scales[first[w]] + (o0 + threadIdx.x % kWideCols) * scale_row;
  }
  uint32_t* const split_base = NW == 2 ? xs : acts;
  int64_t share_pass = -1;
  // The next chunk to load (chunks go in order: pass by pass, group by group), counted, not
  // divided out of a chunk index (a 64-bit division by the runtime group count).
  int64_t load_pass = 0, load_q = 0;
  // The next chunk (pass load_pass, group load_q) into stage `st`: what lies past `in`, past the
  // columns or past the expert's pairs is zeros, as version 3 reads it.
  auto load = [&](int st) {
    uint8_t* sc = smem + st * stage_bytes;
    uint8_t* ss = sc + NW * kWideCols * 64;
    uint32_t* sxa = reinterpret_cast<uint32_t*>(ss + NW * kWideCols * 8);
    uint32_t* sxb = sxa + kWidePairs * kWideXStride;
    const int64_t pass = load_pass, q = load_q;
    if (++load_q == groups) {
      load_q = 0;
      ++load_pass;
    }
    const int64_t i0 = pass * kWidePairs, k0 = 128 * q;
    const int64_t len = in - k0 < 128 ? in - k0 : 128;  // a multiple of 16
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      if constexpr (Whole) {
#pragma unroll
        for (int i = 0; i < kCodePieces; ++i)
          cp_async16(sc + (w * kWideCols + code_r + kCodeRowStep * i) * 64 + code_piece * 16,
                     code_src[w] + i * code_step + k0 / 2);
        if (threadIdx.x < kWideCols)
          cp_async8(ss + (w * kWideCols + threadIdx.x) * 8, scale_src[w] + k0 / 16);
      } else {
        const uint8_t* codes = static_cast<const uint8_t*>(e.data[first[w]]);
        const uint8_t* scales = e.scales[first[w]];
#pragma unroll
        for (int i = threadIdx.x; i < kWideCols * 8; i += 32 * kWideWarps) {
          const int r = i / 8, piece = i % 8;
          const int64_t o = o0 + r;
          uint8_t* d = sc + (w * kWideCols + r) * 64 + piece * 8;
          if (o < columns && 16 * piece < len) {
            const uint8_t* s = codes + o * code_row + k0 / 2 + 8 * piece;
            if (codes8)
              cp_async8(d, s);
            else
              for (int b = 0; b < 8; ++b) d[b] = s[b];
          } else {
            *reinterpret_cast<uint2*>(d) = make_uint2(0, 0);
          }
        }
        for (int r = threadIdx.x; r < kWideCols; r += 32 * kWideWarps) {
          const int64_t o = o0 + r;
          uint8_t* d = ss + (w * kWideCols + r) * 8;
          if (o < columns) {
            const uint8_t* s = scales + o * scale_row + k0 / 16;
            if (scales8 && len == 128) {
              cp_async8(d, s);
            } else {
              for (int b = 0; b < 8; ++b) d[b] = 16 * b < len ? s[b] : 0;
            }
          } else {
            *reinterpret_cast<uint2*>(d) = make_uint2(0, 0);
          }
        }
      }
    }
    if (pass != share_pass) {
#pragma unroll
      for (int sh = 0; sh < kPassShare; ++sh) {
        const int pr = (threadIdx.x + 32 * kWideWarps * sh) / 32;
        if (i0 + pr < n)
          share_row[sh] = static_cast<int32_t>(NW == 2 ? m.order[p0 + i0 + pr] / k : p0 + i0 + pr);
      }
      share_pass = pass;
    }
#pragma unroll
    for (int sh = 0; sh < kPassShare; ++sh) {
      const int i = threadIdx.x + 32 * kWideWarps * sh;
      const int pr = i / 32, j = i % 32;  // inputs 4 j .. 4 j + 3 of the group: chunk k0 / 4 + j
      uint32_t* da = sxa + pr * kWideXStride + (j / 8) * kWideLaneRun + (j % 8) * 4;
      uint32_t* db = sxb + pr * kWideXStrideB + (j / 8) * kWideLaneRunB + (j % 8) * 2;
      if (i0 + pr < n && (Whole || 4 * j < len)) {
        cp_async16(da, split_a(split_base, share_row[sh], in) + k0 / 4 + j);
        cp_async8(db, split_b(split_base, share_row[sh], in) + k0 / 4 + j);
      } else {
        *reinterpret_cast<uint4*>(da) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint2*>(db) = make_uint2(0, 0);
      }
    }
  };
  // Each slice starts from zero: the accumulators are zeroed here and again where a slice ends
  // (not by a test at every chunk, which compiles to a select an accumulator a chunk).
  float acc[kWideTiles][NW][4] = {}, acc_low[kWideTiles][NW][4] = {}, total[kWideTiles][NW][4] = {};
  for (int st = 0; st < kWideStages - 1; ++st) {
    if (st < chunks) load(st);
    cp_async_commit();
  }
  // Chunk c's pass, group and place in its slice, counted.
  int64_t pass = 0, q = 0, in_slice = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    cp_async_wait(kWideStages - 2);
    __syncthreads();  // chunk c is in; every warp is done with chunk c - 1's stage
    if (c + kWideStages - 1 < chunks) load(static_cast<int>((c + kWideStages - 1) % kWideStages));
    cp_async_commit();
    const uint8_t* sc = smem + (c % kWideStages) * stage_bytes;
    const uint8_t* ss = sc + NW * kWideCols * 64;
    const uint32_t* sxa = reinterpret_cast<const uint32_t*>(ss + NW * kWideCols * 8);
    const uint32_t* sxb = sxa + kWidePairs * kWideXStride;
    // Tiles past the expert's pairs (the last pass's) are skipped: their outputs are never stored.
    const int64_t live_pairs = n - pass * kWidePairs;
    // The lane's codes of inputs 32 t .. 32 t + 31 of rows g and g + 8 of its warp's columns,
    // and their two block scales, as version 3 loads them from global memory.
    uint32_t wc[NW][2][4], scl[NW][2][2];
#pragma unroll
    for (int w = 0; w < NW; ++w)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = w * kWideCols + warp * 16 + g + 8 * h;
        const uint4 cw = *reinterpret_cast<const uint4*>(sc + r * 64 + 16 * t);
        wc[w][h][0] = cw.x;
        wc[w][h][1] = cw.y;
        wc[w][h][2] = cw.z;
        wc[w][h][3] = cw.w;
        const uint8_t* sr = ss + r * 8 + 2 * t;
        scl[w][h][0] = e4m3_bf16x2(sr[0]);
        scl[w][h][1] = e4m3_bf16x2(sr[1]);
      }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      uint32_t a[NW][4];
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        e2m1x4_times_scale(wc[w][0][s / 2], s % 2, scl[w][0][s / 4], a[w][0], a[w][2]);
        e2m1x4_times_scale(wc[w][1][s / 2], s % 2, scl[w][1][s / 4], a[w][1], a[w][3]);
      }
#pragma unroll
      for (int tt = 0; tt < kWideTiles; ++tt) {
        if (8 * tt >= live_pairs) break;
        const uint4 va = *reinterpret_cast<const uint4*>(sxa + (8 * tt + g) * kWideXStride +
                                                         t * kWideLaneRun + 4 * s);
        const uint2 vb = *reinterpret_cast<const uint2*>(sxb + (8 * tt + g) * kWideXStrideB +
                                                         t * kWideLaneRunB + 2 * s);
        const uint32_t b[3][2] = {{va.x, va.y}, {va.z, va.w}, {vb.x, vb.y}};
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          mma_bf16(acc_low[tt][w], a[w], b[2][0], b[2][1]);
          mma_bf16(acc_low[tt][w], a[w], b[1][0], b[1][1]);
          mma_bf16(acc[tt][w], a[w], b[0][0], b[0][1]);
        }
      }
    }
    if (in_slice + 1 == groups_per_slice || q + 1 == groups) {  // the slice's end
      const bool first_slice = q < groups_per_slice;
#pragma unroll
      for (int tt = 0; tt < kWideTiles; ++tt)
#pragma unroll
        for (int w = 0; w < NW; ++w)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const float part = acc[tt][w][v] + acc_low[tt][w][v];
            total[tt][w][v] = first_slice ? part : total[tt][w][v] + part;
            acc[tt][w][v] = acc_low[tt][w][v] = 0.0f;  // the next slice's start
          }
    }
    if (q + 1 == groups) {  // the pass's outputs: lane (g, t) holds columns g, g + 8 of its
                            // warp's 16 and pairs 2 t, 2 t + 1 of each tile
      const int64_t i0 = pass * kWidePairs;
#pragma unroll
      for (int tt = 0; tt < kWideTiles; ++tt)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int64_t i = i0 + 8 * tt + 2 * t + (v & 1);
          const int64_t o = o0 + warp * 16 + g + 8 * (v >> 1);
          if (i >= n || o >= columns) continue;
          if constexpr (NW == 2)
            store_act_split(acts, p0 + i, inter, o, total[tt][0][v] * e.scale2[0],
                            total[tt][1][v] * e.scale2[1]);
          else
            store_down(m, p0 + i, k, out_slots, hidden, o, total[tt][0][v] * e.scale2[2], out);
        }
    }
    if (++in_slice == groups_per_slice) in_slice = 0;
    if (++q == groups) {
      q = 0;
      in_slice = 0;
      ++pass;
    }
  }
  cp_async_wait(0);  // nothing left in flight when the block exits
}

// decode_nvfp4_words: thread i decodes word i, both halves, with block scale `scale`.
__global__ void decode_words_kernel(const uint32_t* __restrict__ words, int64_t n, uint8_t scale,
                                    uint32_t* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t sc = e4m3_bf16x2(scale);
  e2m1x4_times_scale<0>(words[i], sc, out[4 * i], out[4 * i + 1]);
  e2m1x4_times_scale<1>(words[i], sc, out[4 * i + 2], out[4 * i + 3]);
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
  const size_t shared = static_cast<size_t>(n_stored) * (2 * sizeof(float) + sizeof(int32_t));
  launch(route_topk_kernel, static_cast<unsigned>(rows), kRouteThreads, shared, stream, logits,
         logit_stride, logit_column, original_id, static_cast<int>(n_stored), static_cast<int>(k),
         norm_topk, expert_index, weight);
  check_launch("route_topk");
}

void launch_expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                           int64_t dim, float* y, cudaStream_t stream, CombineMode mode) {
  if (rows * dim <= 0) return;
  const auto kernel = mode == CombineMode::kSum      ? expert_combine_kernel<true, false>
                      : mode == CombineMode::kSumAdd ? expert_combine_kernel<true, true>
                                                     : expert_combine_kernel<false, false>;
  launch(kernel, blocks_for(rows * dim, 256), 256, 0, stream, expert_out, weight, rows, k, dim, y,
         0.0f);
  check_launch(mode == CombineMode::kSum      ? "expert_sum"
               : mode == CombineMode::kSumAdd ? "expert_sum_add"
                                              : "expert_combine");
}

void launch_expert_sum_add_norm(const float* expert_out, const float* weight, int64_t rows,
                                int64_t k, int64_t dim, float* y, const uint16_t* norm_w, float eps,
                                float* yn, unsigned* counters, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  const dim3 grid(static_cast<unsigned>((dim + kRowNormThreads - 1) / kRowNormThreads),
                  static_cast<unsigned>(rows));
  const auto kernel = dim <= 8 * kRowNormThreads    ? expert_sum_add_norm_kernel<8>
                      : dim <= 16 * kRowNormThreads ? expert_sum_add_norm_kernel<16>
                                                    : expert_sum_add_norm_kernel<0>;
  launch(kernel, grid, kRowNormThreads, 0, stream, expert_out, weight, k, dim, y, norm_w, eps, yn,
         counters, 0.0f);
  check_launch("expert_sum_add_norm");
}

bool set_split_ahead_flag(bool on) {
  return g_split_ahead.exchange(on, std::memory_order_relaxed);
}

int set_v3_down_tiles_flag(int tiles) {
  if (tiles != 1 && tiles != 2)
    throw Error("v3 down tiles " + std::to_string(tiles) + ": 1 or 2 column tiles a block");
  return g_v3_down_tiles.exchange(tiles, std::memory_order_relaxed);
}

int64_t set_wide_rows_flag(int64_t rows) {
  if (rows < -1)
    throw Error("wide rows " + std::to_string(rows) + ": -1 (by pairs an expert), 0 or more");
  return g_wide_rows.exchange(rows, std::memory_order_relaxed);
}

void check_experts_environment() {
  if (const char* t = std::getenv("DRAMA_CUDA_V3_DOWN_TILES"); down_tiles_of(t) == 0)
    throw Error(std::string("DRAMA_CUDA_V3_DOWN_TILES=") + t + ": 1 or 2");
  const char* v = std::getenv("DRAMA_CUDA_WIDE_ROWS");
  if (!v || !*v) return;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < 0)
    throw Error(std::string("DRAMA_CUDA_WIDE_ROWS=") + v +
                ": a row count (0: never the wide layout; unset: by pairs an expert)");
}

namespace {

// The grouping's words and act (moe_layout), then, from the next 16 bytes, version 3's own
// layout's split activations (split_a): act's [pairs, inter] rows, then x's [rows, hidden].
int64_t act_end_floats(int64_t pairs, int64_t inter, int64_t n_stored) {
  // act rows start on 16 bytes (the down product's float4 loads): round the int words up to 4.
  return (pairs + 2 * n_stored + 2 + 3) / 4 * 4 + pairs * inter;
}
struct SplitAreas {
  uint32_t* acts;
  uint32_t* xs;
};
SplitAreas split_areas(float* workspace, int64_t rows, int64_t k, int64_t inter, int64_t n_stored) {
  const int64_t pairs = rows * k;
  const uintptr_t end =
      reinterpret_cast<uintptr_t>(workspace + act_end_floats(pairs, inter, n_stored));
  uint32_t* acts = reinterpret_cast<uint32_t*>((end + 15) / 16 * 16);
  return {acts, acts + 3 * pairs * inter / 2};
}

}  // namespace

int64_t moe_layout_floats(int64_t rows, int64_t k, int64_t hidden, int64_t inter,
                          int64_t n_stored) {
  const int64_t pairs = rows * k;
  return act_end_floats(pairs, inter, n_stored) + 4 + 3 * pairs * inter / 2 + 3 * rows * hidden / 2;
}

// The wide kernel of matrices NW (2 gate/up, 1 down) for whole chunks or not, in passes of 32
// pairs (four tiles) or 16.
template <int NW>
auto* wide_kernel(bool whole, bool four) {
  return four ? (whole ? moe_nvfp4_v3_wide_kernel<NW, true, 4>
                       : moe_nvfp4_v3_wide_kernel<NW, false, 4>)
              : (whole ? moe_nvfp4_v3_wide_kernel<NW, true, 2>
                       : moe_nvfp4_v3_wide_kernel<NW, false, 2>);
}

void launch_moe_experts(const DeviceExpert* experts, WeightFormat format, int64_t n_stored,
                        bool on16, int64_t hidden, int64_t inter, const float* x, int64_t rows,
                        const int32_t* expert_index, int64_t k, int64_t out_slots, float* out,
                        float* workspace, cudaStream_t stream, int version) {
  const int64_t pairs = rows * k;
  if (pairs <= 0) return;
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && hidden % 4 == 0;
  const bool v3 =
      version == 3 && format == WeightFormat::NVFP4 && hidden % 16 == 0 && inter % 16 == 0;
  const bool wide = v3 && wide_layout(rows, k, n_stored);
  // Version 3 reads its activations split (its own layout unless set_split_ahead(false), the wide
  // one always): the grouping's further blocks split x (moe_group_kernel).
  const bool ahead = v3 && (wide || g_split_ahead.load(std::memory_order_relaxed));
  const SplitAreas split = split_areas(workspace, rows, k, inter, n_stored);
  const int64_t split_chunks = ahead ? rows * (hidden / 4) : 0;
  const unsigned split_blocks =
      static_cast<unsigned>(std::min<int64_t>((split_chunks + 255) / 256, 128));
  launch(moe_group_kernel, 1 + split_blocks, 256,
         static_cast<size_t>(n_stored + 1) * sizeof(int32_t), stream, expert_index, pairs, n_stored,
         workspace, x, rows, hidden, vec_x, split_chunks ? split.xs : nullptr);
  check_launch("moe_experts grouping");
  const unsigned slots = static_cast<unsigned>(pairs < n_stored ? pairs : n_stored);
  const unsigned threads = 32 * kExpertWarps;
  const bool vec_act = reinterpret_cast<uintptr_t>(workspace) % 16 == 0 && inter % 4 == 0;
  if (v3) {
    const V3Split up = v3_split(hidden), down = v3_split(inter);
    if (wide) {
      static std::atomic<int64_t> up_allowed[2][2] = {}, down_allowed[2][2] = {};
      const bool whole = on16 && hidden % 128 == 0 && inter % 128 == 0;
      const bool four = pairs >= kWide4TilePairs * n_stored;  // both products in passes of 32
      auto* up_kernel = wide_kernel<2>(whole, four);
      auto* down_kernel = wide_kernel<1>(whole, four);
      const int64_t up_bytes = kWideStages * wide_stage_bytes(2, four ? 4 : 2),
                    down_bytes = kWideStages * wide_stage_bytes(1, four ? 4 : 2);
      allow_shared(up_kernel, up_bytes, up_allowed[four][whole], "moe_experts v3 wide gate/up");
      allow_shared(down_kernel, down_bytes, down_allowed[four][whole], "moe_experts v3 wide down");
      launch(up_kernel, dim3(slots, blocks_for(inter, kWideCols)), 32 * kWideWarps,
             static_cast<size_t>(up_bytes), stream, experts, n_stored, hidden, inter, split.xs,
             pairs, k, out_slots, up.groups_per_slice, split.acts, workspace, out);
      check_launch("moe_experts gate/up (v3 wide)");
      launch(down_kernel, dim3(slots, blocks_for(hidden, kWideCols)), 32 * kWideWarps,
             static_cast<size_t>(down_bytes), stream, experts, n_stored, hidden, inter, split.xs,
             pairs, k, out_slots, down.groups_per_slice, split.acts, workspace, out);
      check_launch("moe_experts down (v3 wide)");
      return;
    }
    const int down_tiles = g_v3_down_tiles.load(std::memory_order_relaxed);
    const dim3 up_grid(slots, blocks_for(inter, kV3Cols)),
        down_grid(slots, blocks_for(hidden, kV3Cols * down_tiles));
    // Whole loads (moe_nvfp4_v3_kernel's Whole) where every load of gate/up lies inside its
    // shapes; gate/up only: down in the whole form measured slower (H100 2026-12-07 09:46: 12.6
    // -> 13.3 us a layer at one row, where gate/up went 18.1 -> 17.1).
    const bool whole_up = ahead && hidden % 128 == 0 && inter % kV3Cols == 0;
    launch(whole_up ? moe_nvfp4_v3_kernel<2, true, true>
           : ahead  ? moe_nvfp4_v3_kernel<2, true>
                    : moe_nvfp4_v3_kernel<2, false>,
           up_grid, 32 * up.slices, 0, stream, experts, n_stored, hidden, inter, x, vec_x, split.xs,
           pairs, k, out_slots, up.groups_per_slice, split.acts, workspace, out);
    check_launch("moe_experts gate/up (v3)");
    // Down at two tiles a block takes the whole loads where the shapes allow (ptxas, sm_90a: 8 / 12
    // bytes spilled, against 100 / 96 checked; at one tile the whole loads measured slower).
    const bool whole_down = ahead && inter % 128 == 0 && hidden % (2 * kV3Cols) == 0;
    launch(down_tiles == 2 ? (whole_down ? moe_nvfp4_v3_kernel<1, true, true, 2>
                              : ahead    ? moe_nvfp4_v3_kernel<1, true, false, 2>
                                         : moe_nvfp4_v3_kernel<1, false, false, 2>)
                           : (ahead ? moe_nvfp4_v3_kernel<1, true> : moe_nvfp4_v3_kernel<1, false>),
           down_grid, 32 * down.slices, 0, stream, experts, n_stored, hidden, inter, x, vec_act,
           split.xs, pairs, k, out_slots, down.groups_per_slice, split.acts, workspace, out);
    check_launch("moe_experts down (v3)");
    return;
  }
  if (version >= 2 && format == WeightFormat::NVFP4 && hidden % 16 == 0 && inter % 16 == 0) {
    const int tile_rows = static_cast<int>(rows < kRowTile ? rows : kRowTile);
    const int64_t up_bytes = v2_shared_bytes(2, kUpCols, hidden, tile_rows),
                  down_bytes = v2_shared_bytes(1, kDownCols, inter, tile_rows);
    int device = 0, max_shared = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute");
    if (up_bytes <= max_shared && down_bytes <= max_shared) {
      static std::atomic<int64_t> up_allowed{0}, down_allowed{0};
      auto* up = moe_nvfp4_v2_kernel<2, kUpCols, kUpStages>;
      auto* down = moe_nvfp4_v2_kernel<1, kDownCols, kDownStages>;
      allow_shared(up, up_bytes, up_allowed, "moe_experts v2 gate/up");
      allow_shared(down, down_bytes, down_allowed, "moe_experts v2 down");
      launch(up, dim3(slots, blocks_for(inter, kUpCols)), kV2Threads, static_cast<size_t>(up_bytes),
             stream, experts, n_stored, hidden, inter, x, pairs, k, out_slots, tile_rows, vec_x,
             workspace, out);
      check_launch("moe_experts gate/up (v2)");
      launch(down, dim3(slots, blocks_for(hidden, kDownCols)), kV2Threads,
             static_cast<size_t>(down_bytes), stream, experts, n_stored, hidden, inter, x, pairs, k,
             out_slots, tile_rows, vec_act, workspace, out);
      check_launch("moe_experts down (v2)");
      return;
    }
  }
  const dim3 grid_up(slots, blocks_for(inter, kExpertWarps)),
      grid_down(slots, blocks_for(hidden, kExpertWarps));
  if (format == WeightFormat::NVFP4) {
    launch(moe_gate_up_kernel<WeightFormat::NVFP4>, grid_up, threads, 0, stream, experts, n_stored,
           hidden, inter, x, pairs, k, vec_x, workspace);
    check_launch("moe_experts gate/up");
    launch(moe_down_kernel<WeightFormat::NVFP4>, grid_down, threads, 0, stream, experts, n_stored,
           hidden, inter, pairs, k, out_slots, vec_act, workspace, out);
  } else {
    launch(moe_gate_up_kernel<WeightFormat::BF16>, grid_up, threads, 0, stream, experts, n_stored,
           hidden, inter, x, pairs, k, vec_x, workspace);
    check_launch("moe_experts gate/up");
    launch(moe_down_kernel<WeightFormat::BF16>, grid_down, threads, 0, stream, experts, n_stored,
           hidden, inter, pairs, k, out_slots, vec_act, workspace, out);
  }
  check_launch("moe_experts down");
}

namespace {

bool same_weight(const LinearWeight& a, const LinearWeight& b) {
  return a.format == b.format && a.out == b.out && a.in == b.in && a.data == b.data &&
         a.scales == b.scales && std::memcmp(&a.scale2, &b.scale2, sizeof(float)) == 0;
}

}  // namespace

void CudaBackend::prepare_experts(const ExpertWeights* experts, int64_t n_stored) {
  if (n_stored <= 0) return;
  const std::pair<const void*, const void*> key{experts, experts[0].gate.data};
  const auto it = expert_tables_.find(key);
  // A table under this key is used only while it was made from these very weights (n_stored of
  // them at least). Without this check a stale one was used as it was: the parity test frees each
  // shape's host array and device weights, the next shape's array and first weight can land on
  // the same addresses, and moe_experts then read through the old table the previous shape's
  // freed weights (past their ends where the new shape is larger; past the table's end where it
  // has more experts): garbage codes and block scales, the same for v1 and v2, NaN where a garbage
  // scale byte is an E4M3 NaN (0x7f, 0xff).
  if (it != expert_tables_.end() && static_cast<int64_t>(it->second.experts.size()) >= n_stored &&
      std::equal(experts, experts + n_stored, it->second.experts.begin(),
                 [](const ExpertWeights& a, const ExpertWeights& b) {
                   return same_weight(a.gate, b.gate) && same_weight(a.up, b.up) &&
                          same_weight(a.down, b.down);
                 }))
    return;
  const WeightFormat format = experts[0].gate.format;
  const int64_t inter = experts[0].gate.out, hidden = experts[0].down.out;
  std::vector<DeviceExpert> host(static_cast<size_t>(n_stored));
  bool on16 = true;
  for (int64_t s = 0; s < n_stored; ++s) {
    const LinearWeight* w[3] = {&experts[s].gate, &experts[s].up, &experts[s].down};
    for (int m = 0; m < 3; ++m) {
      if (w[m]->format != format || w[m]->out != (m < 2 ? inter : hidden))
        throw Error("CUDA moe_experts: every stored expert must share one format and shape");
      host[s].data[m] = w[m]->data;
      host[s].scales[m] = w[m]->scales;
      host[s].scale2[m] = w[m]->scale2;
      on16 = on16 && reinterpret_cast<uintptr_t>(w[m]->data) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(w[m]->scales) % 16 == 0;
    }
  }
  // alloc and upload refuse captured work, so a table is never made inside a capture.
  std::unique_ptr<DeviceBuffer> made = alloc(host.size() * sizeof(DeviceExpert));
  upload(made->data(), host.data(), host.size() * sizeof(DeviceExpert));
  if (it != expert_tables_.end()) {
    // The stale table may still be read by queued kernels or named by a captured graph.
    synchronize();
    forget_captured();
  }
  ExpertTable& table = expert_tables_[key];  // only once the new one is made
  table.experts.assign(experts, experts + n_stored);
  table.device = std::move(made);
  table.on16 = on16;
}

void CudaBackend::moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x,
                              int64_t rows, int64_t hidden, const int32_t* expert_index, int64_t k,
                              int64_t out_slots, float* out, float* workspace) {
  if (rows <= 0 || n_stored <= 0) return;
  const WeightFormat format = experts[0].gate.format;
  const int64_t inter = experts[0].gate.out;
  if (experts[0].down.out != hidden)
    throw Error("CUDA moe_experts: the experts' output is not the hidden size");
  // Checks the cached table against the array (n_stored weight compares, no device work when it
  // matches); a caller without MoeBlock (contract, bench, tests) gets its table made here.
  prepare_experts(experts, n_stored);
  const ExpertTable& table = expert_tables_.at({experts, experts[0].gate.data});
  if (moe_layout_floats(rows, k, hidden, inter, n_stored) >
      Backend::moe_workspace_floats(rows, k, hidden, inter, n_stored))
    throw Error("CUDA moe_experts: the workspace layout outgrew Backend::moe_workspace_floats");
  launch_moe_experts(static_cast<const DeviceExpert*>(table.device->data()), format, n_stored,
                     table.on16, hidden, inter, x, rows, expert_index, k, out_slots, out, workspace,
                     stream_, experts_version_);
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
  try {
    cuda->moe_experts(experts, n_stored, x, rows, hidden, expert_index, k, out_slots, out,
                      workspace);
  } catch (...) {  // leave capture mode before the error goes on (else the stream stays capturing)
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the instantiated graph does not need it
  check(made, "cudaGraphInstantiate");
  return median_replay_seconds(exec, stream, replays);
}

std::vector<uint16_t> decode_nvfp4_words(Backend& backend, const std::vector<uint32_t>& words,
                                         uint8_t scale) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw Error("the NVFP4 decode needs the CUDA backend, not " + backend.name());
  const int64_t n = static_cast<int64_t>(words.size());
  std::vector<uint16_t> out(static_cast<size_t>(8 * n));
  if (n == 0) return out;
  auto in_d = backend.alloc(words.size() * 4), out_d = backend.alloc(out.size() * 2);
  backend.upload(in_d->data(), words.data(), words.size() * 4);
  decode_words_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, cuda->stream()>>>(
      static_cast<const uint32_t*>(in_d->data()), n, scale, static_cast<uint32_t*>(out_d->data()));
  check_launch("decode_nvfp4_words");
  backend.download(out.data(), out_d->data(), out.size() * 2);
  return out;
}

int set_moe_experts_version(Backend& backend, int version) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw Error("the grouped expert kernels need the CUDA backend, not " + backend.name());
  if (version < 1 || version > 3)
    throw Error("moe_experts version " + std::to_string(version) + ": 1, 2 or 3");
  const int before = cuda->experts_version();
  cuda->set_experts_version(version);
  return before;
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
  launch_expert_combine(expert_out, weight, rows, k, dim, y, stream_, CombineMode::kCombine);
}

void CudaBackend::expert_sum(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                             int64_t dim, float* y) {
  launch_expert_combine(expert_out, weight, rows, k, dim, y, stream_, CombineMode::kSum);
}

void CudaBackend::expert_sum_add(const float* expert_out, const float* weight, int64_t rows,
                                 int64_t k, int64_t dim, float* /*scratch*/, float* y) {
  launch_expert_combine(expert_out, weight, rows, k, dim, y, stream_, CombineMode::kSumAdd);
}

void CudaBackend::expert_sum_add_norm(const float* expert_out, const float* weight, int64_t rows,
                                      int64_t k, int64_t dim, float* /*scratch*/, float* y,
                                      const uint16_t* norm_w, float eps, float* yn) {
  launch_expert_sum_add_norm(expert_out, weight, rows, k, dim, y, norm_w, eps, yn,
                             counters(static_cast<size_t>(rows)), stream_);
}

}  // namespace drama::cuda

#include "backend/cuda/attention.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "util/error.h"

namespace drama::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps; value dimensions per pass
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;                 // positions per chunk
constexpr int kPerWarp = kChunk / kWarps;  // positions whose scores a warp forms per chunk
constexpr int kMaxHeadDim = 2 * kThreads;
constexpr int kDimsPerLane = kMaxHeadDim / 32;
constexpr int kSplits = 16;  // blocks per (row, head): a fixed split, whatever the batch

// out[t] = sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M) over the `used` splits that hold
// positions, in increasing s, by the block of the split that finished last (its loads through L2:
// the other splits wrote them); the dimensions d = first, first + step, ... (the block's threads,
// or a warp's lanes: the same arithmetic for every d).
__device__ void merge_splits(const float* pt, int64_t head_dim, int used, float* out, int64_t first,
                             int64_t step) {
  float big = -__int_as_float(0x7f800000);
  for (int s = 0; s < used; ++s) big = fmaxf(big, __ldcg(pt + s * (head_dim + 2)));
  float l = 0.0f;
  float w[kSplits];
  for (int s = 0; s < used; ++s) {
    const float ms = __ldcg(pt + s * (head_dim + 2));
    w[s] = ms == -__int_as_float(0x7f800000) ? 0.0f : expf(ms - big);
    l += __ldcg(pt + s * (head_dim + 2) + 1) * w[s];
  }
  const float inv = 1.0f / l;
  for (int64_t d = first; d < head_dim; d += step) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s) o += __ldcg(pt + s * (head_dim + 2) + 2 + d) * w[s];
    out[d] = o * inv;
  }
}

// Split s of (row, head) t takes the chunks c = s, s + kSplits, ... of kChunk positions of the
// row's span (from its window's first position), in increasing c, with a running maximum m,
// exp-sum l and value sums acc. Per chunk:
// - score of position j (warp w forms those of positions w * kPerWarp + u): lane l sums
//   q[d] k[d] for d = l, l + 32, ... < head_dim in increasing d with fmaf, then warp_sum's fixed
//   butterfly, times 1/sqrt(head_dim);
// - warp 0: the chunk's exact maximum, m_new = max(m, it), e_i = exp(score_i - m_new), and their
//   sum by warp_sum (lane i holds e_i);
// - l = l exp(m - m_new) + that sum; value dimension d: a = sum_i e_i v_i[d] with fmaf in
//   increasing position, acc = acc exp(m - m_new) + a.
// Every operation is fixed by the row's own position and window, never by the batch. Loads go
// ahead of their arithmetic: a chunk's values (first pass) are requested before its scores.
// It writes (m, l, acc) to partial[t][s]. A split past the row's chunks (a span of fewer than
// kSplits chunks) has nothing to add and returns at once: the row's own span says how many
// splits hold positions, and the last of those merges.
__global__ void attention_split_kernel(const float* __restrict__ q,
                                       const int32_t* __restrict__ positions,
                                       const int32_t* __restrict__ cache_row0,
                                       const float* __restrict__ k_cache,
                                       const float* __restrict__ v_cache, int64_t n_heads,
                                       int64_t n_kv_heads, int64_t head_dim, int64_t window,
                                       float scale, float* __restrict__ partial,
                                       unsigned* __restrict__ counters, float* __restrict__ out) {
  pdl_entry();
  __shared__ float p[kChunk];
  __shared__ float scores[kChunk];
  __shared__ float stats[3];     // m_new, exp(m - m_new), the chunk's exp sum
  const int64_t t = blockIdx.x;  // row * n_heads + head
  const int split = blockIdx.y;
  const int64_t r = t / n_heads, h = t % n_heads, kvh = h / (n_heads / n_kv_heads);
  const int64_t last = positions[r];
  const int64_t first = window > 0 ? (last - window + 1 > 0 ? last - window + 1 : 0) : 0;
  const int64_t chunks = (last - first + kChunk) / kChunk;
  const int used = static_cast<int>(chunks < kSplits ? chunks : kSplits);
  if (split >= used) return;  // the whole block
  const int64_t kv_stride = n_kv_heads * head_dim;
  const float* qv = q + t * head_dim;
  const int64_t base = (cache_row0 ? cache_row0[r] : 0) * kv_stride + kvh * head_dim;
  const float* kbase = k_cache + base;
  const float* vbase = v_cache + base;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float qreg[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qreg[i] = d < head_dim ? qv[d] : 0.0f;
  }

  float m = -__int_as_float(0x7f800000), l = 0.0f;
  float acc[2] = {0.0f, 0.0f};
  for (int64_t j0 = first + static_cast<int64_t>(split) * kChunk; j0 <= last;
       j0 += static_cast<int64_t>(kSplits) * kChunk) {
    const int n = static_cast<int>(last - j0 + 1 < kChunk ? last - j0 + 1 : kChunk);
    // The first pass's values of the chunk, requested before anything waits on them.
    float vv[kChunk];
    const int64_t d0 = threadIdx.x;
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      vv[i] = i < n && d0 < head_dim ? vbase[(j0 + i) * kv_stride + d0] : 0.0f;
    float kv[kPerWarp][kDimsPerLane];
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u)
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int pos = warp * kPerWarp + u;
        const int64_t d = lane + 32 * i;
        kv[u][i] = pos < n && d < head_dim ? kbase[(j0 + pos) * kv_stride + d] : 0.0f;
      }
    __syncthreads();  // the previous chunk's scores, p and stats have been read
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i)
        if (lane + 32 * i < head_dim) dot = fmaf(qreg[i], kv[u][i], dot);
      dot = warp_sum(dot);
      if (lane == 0) scores[warp * kPerWarp + u] = dot * scale;
    }
    __syncthreads();
    if (warp == 0) {
      const float sc = lane < n ? scores[lane] : -__int_as_float(0x7f800000);
      const float m_new = fmaxf(m, warp_max(sc));
      const float e = lane < n ? expf(sc - m_new) : 0.0f;
      p[lane] = e;
      const float sum = warp_sum(e);
      if (lane == 0) {
        stats[0] = m_new;
        stats[1] = expf(m - m_new);  // 0 for the first chunk (m = -inf)
        stats[2] = sum;
      }
    }
    __syncthreads();
    const float m_new = stats[0], alpha = stats[1];
    l = l * alpha + stats[2];
    for (int part = 0; part < 2; ++part) {
      const int64_t d = threadIdx.x + part * kThreads;
      if (d >= head_dim) break;
      if (part == 1) {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) vv[i] = i < n ? vbase[(j0 + i) * kv_stride + d] : 0.0f;
      }
      float a = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        if (i < n) a = fmaf(p[i], vv[i], a);
      acc[part] = acc[part] * alpha + a;
    }
    m = m_new;
  }
  float* mine = partial + (t * kSplits + split) * (head_dim + 2);
  if (threadIdx.x == 0) {
    mine[0] = m;
    mine[1] = l;
  }
  for (int part = 0; part < 2; ++part) {
    const int64_t d = threadIdx.x + part * kThreads;
    if (d < head_dim) mine[2 + d] = acc[part];
  }
  // The last of the `used` blocks of (row, head) t merges them (whichever it is, it reads the
  // same partials in the same order) and sets the counter back to 0 for the next call.
  if (!last_to_finish(counters + t, used)) return;
  merge_splits(partial + t * kSplits * (head_dim + 2), head_dim, used, out + t * head_dim,
               threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) counters[t] = 0;
}

// ---- Version 2 (the default): the query heads of a KV head share one block ----
//
// A block owns (row, KV head, head group, split): up to kGqaHeads query heads of the KV head, one
// warp each, and a run of consecutive chunks of kChunk positions of the row's span (gqa_run: at
// least 4 chunks a split, at most kSplits splits; a function of the span alone). Each chunk's keys
// and values are copied once into shared memory (cp.async, double-buffered: the next chunk is in
// flight while this one is summed) and read by every head of the block, where version 1 read them
// once per query head. Per chunk and head:
// - score of position j (lane j): q[d] k_j[d] in four running sums over d = 4i + 0..3 (each with
//   fmaf in increasing i), added as (s0 + s1) + (s2 + s3), times 1/sqrt(head_dim);
// - the chunk's exact maximum (warp_max), m_new = max(m, it), e_j = exp(score_j - m_new) and
//   their sum (warp_sum), l = l exp(m - m_new) + that sum;
// - value dimension d (lane l holds d = 4 l + 128 i .. + 3): a = sum_j e_j v_j[d] with fmaf in
//   increasing position, acc = acc exp(m - m_new) + a.
// The splits are merged as version 1 merges them (one warp per head); a row whose span is one
// split writes its output at once with the merge's arithmetic for one split. Every operation is
// fixed by the row's own position and window and the shapes, never by the batch or by how many
// heads share a block.
constexpr int kGqaHeads = 8;
constexpr int kGqaDimGroups = kMaxHeadDim / 128;  // float4 groups of value dimensions per lane

// Chunks per split of version 2 for a span of `chunks` chunks: runs of at least kGqaRun chunks
// (a span of up to kGqaRun * kChunk positions is one split: no merge), more where the span needs
// more than kSplits runs.
constexpr int64_t kGqaRun = 4;
__host__ __device__ inline int64_t gqa_run(int64_t chunks) {
  const int64_t even = (chunks + kSplits - 1) / kSplits;
  return even > kGqaRun ? even : kGqaRun;
}

// Floats of a v2 block's dynamic shared memory: the heads' queries, then kGqaBuffers chunk
// buffers of keys [kChunk][head_dim + 4] (4 floats of padding: lanes reading different keys hit
// different banks) and values [kChunk][head_dim].
constexpr int kGqaBuffers = 2;
__host__ __device__ inline int64_t gqa_shared_floats(int heads, int64_t head_dim) {
  return heads * head_dim + kGqaBuffers * kChunk * (2 * head_dim + 4);
}

// Grid (row * n_kv_heads * head_groups, kSplits); blockDim 32 * heads (heads: query heads per
// block, at most kGqaHeads; the launch picks it, and no head's arithmetic depends on it).
// head_dim % 4 == 0, at most kMaxHeadDim; q, k_cache and v_cache on 16 bytes (launch_attention
// checks). Split s of a row takes the chunks [s * run, (s + 1) * run) of its span.
//
// Quad (the layout for few rows, same bits): where a launch has few blocks (a few rows: 16 blocks
// of 2 heads at one row of bench-30b-a3b) each block's two warps ran every chunk's loops alone,
// latency-bound (Nsight Compute at one row: 12.7 us, 4.5% occupancy, 0.48 instructions a cycle,
// results/ncu-attention-rows1-h200.json). The quad layout gives a block 128 threads a head: a
// score's four running sums s0..s3 are four threads' fmaf chains (thread 4 j + c of the head
// runs s_c of position j), added by two shuffles as (s0 + s1) + (s2 + s3) (an addition is
// commutative, so either lane's sum has the bits); a value dimension is a thread's own chain
// (thread t of the head: dimensions t + 128 g). The same operations in the same order for every
// score, weight and output as one warp a head, so the same bits.
template <bool Quad>
__global__ void __launch_bounds__((Quad ? 128 : 32) * kGqaHeads)
    attention_gqa_kernel(const float* __restrict__ q, const int32_t* __restrict__ positions,
                         const int32_t* __restrict__ cache_row0, const float* __restrict__ k_cache,
                         const float* __restrict__ v_cache, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, int64_t window, float scale, int heads,
                         float* __restrict__ partial, unsigned* __restrict__ counters,
                         float* __restrict__ out) {
  pdl_entry();
  extern __shared__ __align__(16) float smem[];
  __shared__ float ps[kGqaHeads][kChunk];  // each head's weights e_j of the chunk
  // Quad: each head's scores of the chunk; its rescale factor, then (after the last chunk) m, l.
  __shared__ float qsc[Quad ? kGqaHeads : 1][kChunk];
  __shared__ float head_stat[Quad ? 3 : 1][kGqaHeads];
  const int hd = static_cast<int>(head_dim);
  const int64_t group = n_heads / n_kv_heads;
  const int64_t head_groups = (group + heads - 1) / heads;
  const int64_t u = blockIdx.x;  // (row * n_kv_heads + kv head) * head_groups + head group
  const int split = blockIdx.y;
  const int64_t hg = u % head_groups, kvh = (u / head_groups) % n_kv_heads;
  const int64_t r = u / head_groups / n_kv_heads;
  const int64_t last = positions[r];
  const int64_t first = window > 0 ? (last - window + 1 > 0 ? last - window + 1 : 0) : 0;
  const int64_t chunks = (last - first + kChunk) / kChunk;
  const int64_t run = gqa_run(chunks);
  const int used = static_cast<int>((chunks + run - 1) / run);
  if (split >= used) return;  // the whole block
  const int64_t c0 = split * run, c1 = c0 + run < chunks ? c0 + run : chunks;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t h0 = kvh * group + hg * heads;
  const int64_t rest = group - hg * heads;
  const int n_mine = static_cast<int>(rest < heads ? rest : heads);
  const bool active = warp < n_mine;  // the same for every lane of the warp
  const int64_t h = h0 + warp;
  const int ks = hd + 4, buf_floats = kChunk * (ks + hd), pieces = hd / 4;
  const int64_t kv_stride = n_kv_heads * head_dim;
  float* qs = smem;                 // [heads][hd]
  float* bufs = smem + heads * hd;  // [kGqaBuffers] chunk buffers
  const int64_t base = (cache_row0 ? cache_row0[r] : 0) * kv_stride + kvh * head_dim;
  // Keys and values of chunk c into buffer b: a position's key and value rows are 2 * pieces
  // 16-byte pieces, taken by `across` threads side by side, `passes` positions at a time (the
  // divisions once per block, not per piece).
  const int per_row = 2 * pieces;
  const int across =
      static_cast<int>(blockDim.x) < per_row ? static_cast<int>(blockDim.x) : per_row;
  const int passes = static_cast<int>(blockDim.x) / across;
  const int jt = static_cast<int>(threadIdx.x) / across,
            pt = static_cast<int>(threadIdx.x) % across;
  auto load_chunk = [&](int64_t c, float* b) {
    const int64_t j0 = first + c * kChunk;
    const int n = static_cast<int>(last - j0 + 1 < kChunk ? last - j0 + 1 : kChunk);
    const float* kc = k_cache + base + j0 * kv_stride;
    const float* vc = v_cache + base + j0 * kv_stride;
    if (jt >= passes) return;
    for (int j = jt; j < n; j += passes)
      for (int p = pt; p < per_row; p += across) {
        const bool value = p >= pieces;
        const int pp = value ? p - pieces : p;
        const float* src = (value ? vc : kc) + j * kv_stride + 4 * pp;
        float* dst = value ? b + kChunk * ks + j * hd + 4 * pp : b + j * ks + 4 * pp;
        cp_async16(dst, src);
      }
  };
  for (int i = threadIdx.x; i < n_mine * pieces; i += blockDim.x)
    cp_async16(qs + 4 * i, q + (r * n_heads + h0) * head_dim + 4 * i);
  // The first kGqaBuffers chunks of the run, each its own commit group (the queries ride in the
  // first); chunk c + kGqaBuffers goes into chunk c's buffer once every head is done with it.
  int64_t issued = c0;
  for (; issued < c1 && issued < c0 + kGqaBuffers; ++issued) {
    load_chunk(issued, bufs + (issued - c0) * buf_floats);
    cp_async_commit();
  }

  float m = -__int_as_float(0x7f800000), l = 0.0f;
  float4 acc[kGqaDimGroups];
  float qacc[kGqaDimGroups];  // quad: dimensions qt + 128 g of head qh
#pragma unroll
  for (int g = 0; g < kGqaDimGroups; ++g) {
    acc[g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    qacc[g] = 0.0f;
  }
  // Quad: this thread's head, and its place in the head's 128 threads (scores: position qt / 4,
  // running sum qt % 4; values: dimensions qt + 128 g). A whole warp has one head.
  const int qh = static_cast<int>(threadIdx.x) / 128, qt = static_cast<int>(threadIdx.x) % 128;
  const bool quad_mine = qh < n_mine;
  float* pw = ps[warp];  // blockDim is at most 32 * kGqaHeads
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t j0 = first + c * kChunk;
    cp_async_wait(static_cast<int>(issued - c - 1));
    __syncthreads();  // this chunk (and the queries) are in shared memory for every thread
    const float* K = bufs + (c - c0) % kGqaBuffers * buf_floats;
    const float* V = K + kChunk * ks;
    const int n = static_cast<int>(last - j0 + 1 < kChunk ? last - j0 + 1 : kChunk);
    if constexpr (Quad) {
      if (quad_mine) {
        const int qj = qt / 4, qc = qt % 4;
        float sum = 0.0f;
        if (qj < n) {
          const float* kr = K + qj * ks + qc;
          const float* qr = qs + qh * hd + qc;
#pragma unroll 4
          for (int d4 = 0; d4 < pieces; ++d4) sum = fmaf(qr[4 * d4], kr[4 * d4], sum);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // s0 + s1 (and s2 + s3)
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);  // (s0 + s1) + (s2 + s3)
        if (qc == 0) qsc[qh][qj] = qj < n ? sum * scale : -__int_as_float(0x7f800000);
      }
      __syncthreads();
      if (active) {
        const float score = qsc[warp][lane];
        const float m_new = fmaxf(m, warp_max(score));
        const float e = lane < n ? expf(score - m_new) : 0.0f;
        const float sum = warp_sum(e);
        const float alpha = expf(m - m_new);  // 0 for the first chunk (m = -inf)
        l = l * alpha + sum;
        pw[lane] = e;
        if (lane == 0) head_stat[0][warp] = alpha;
        m = m_new;
      }
      __syncthreads();
      if (quad_mine) {
        const float alpha = head_stat[0][qh];
        const float* e = ps[qh];
#pragma unroll
        for (int g = 0; g < kGqaDimGroups; ++g) {
          const int d = qt + 128 * g;
          if (d < hd) {
            float a = 0.0f;
#pragma unroll 4
            for (int j = 0; j < n; ++j) a = fmaf(e[j], V[j * hd + d], a);
            qacc[g] = qacc[g] * alpha + a;
          }
        }
      }
    } else if (active) {
      // Score of position j (lane j): four running sums over d = 4i + 0..3 (each in increasing
      // i with fmaf), added as (s0 + s1) + (s2 + s3), times 1/sqrt(head_dim).
      float score = -__int_as_float(0x7f800000);
      if (lane < n) {
        const float4* kr = reinterpret_cast<const float4*>(K + lane * ks);
        const float4* qr = reinterpret_cast<const float4*>(qs + warp * hd);
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll 4
        for (int d4 = 0; d4 < pieces; ++d4) {
          const float4 kk = kr[d4], qq = qr[d4];
          s0 = fmaf(qq.x, kk.x, s0);
          s1 = fmaf(qq.y, kk.y, s1);
          s2 = fmaf(qq.z, kk.z, s2);
          s3 = fmaf(qq.w, kk.w, s3);
        }
        score = ((s0 + s1) + (s2 + s3)) * scale;
      }
      const float m_new = fmaxf(m, warp_max(score));
      const float e = lane < n ? expf(score - m_new) : 0.0f;
      const float sum = warp_sum(e);
      const float alpha = expf(m - m_new);  // 0 for the first chunk (m = -inf)
      l = l * alpha + sum;
      pw[lane] = e;
      __syncwarp();
      float4 a[kGqaDimGroups];
#pragma unroll
      for (int g = 0; g < kGqaDimGroups; ++g) a[g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int j = 0; j < n; ++j) {
        const float ej = pw[j];  // one address for the whole warp: a broadcast
#pragma unroll
        for (int g = 0; g < kGqaDimGroups; ++g) {
          const int d = 4 * lane + 128 * g;
          if (d < hd) {
            const float4 vv = *reinterpret_cast<const float4*>(V + j * hd + d);
            a[g].x = fmaf(ej, vv.x, a[g].x);
            a[g].y = fmaf(ej, vv.y, a[g].y);
            a[g].z = fmaf(ej, vv.z, a[g].z);
            a[g].w = fmaf(ej, vv.w, a[g].w);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kGqaDimGroups; ++g) {
        acc[g].x = acc[g].x * alpha + a[g].x;
        acc[g].y = acc[g].y * alpha + a[g].y;
        acc[g].z = acc[g].z * alpha + a[g].z;
        acc[g].w = acc[g].w * alpha + a[g].w;
      }
      m = m_new;
    }
    __syncthreads();  // every head is done with this buffer (and its weights) before they refill
    if (issued < c1) {
      load_chunk(issued, bufs + (issued - c0) % kGqaBuffers * buf_floats);
      cp_async_commit();
      ++issued;
    }
  }
  if constexpr (Quad) {
    if (active && lane == 0) {
      head_stat[1][warp] = m;
      head_stat[2][warp] = l;
    }
    __syncthreads();
    if (quad_mine) {
      const float mq = head_stat[1][qh], lq = head_stat[2][qh];
      if (used == 1) {
        // The merge of one split, as below.
        const float big = fmaxf(-__int_as_float(0x7f800000), mq);
        const float w = mq == -__int_as_float(0x7f800000) ? 0.0f : expf(mq - big);
        const float inv = 1.0f / (0.0f + lq * w);
        float* o = out + (r * n_heads + h0 + qh) * head_dim;
#pragma unroll
        for (int g = 0; g < kGqaDimGroups; ++g) {
          const int d = qt + 128 * g;
          if (d < hd) o[d] = (0.0f + qacc[g] * w) * inv;
        }
      } else {
        float* mine = partial + ((r * n_heads + h0 + qh) * kSplits + split) * (head_dim + 2);
        if (qt == 0) {
          mine[0] = mq;
          mine[1] = lq;
        }
#pragma unroll
        for (int g = 0; g < kGqaDimGroups; ++g) {
          const int d = qt + 128 * g;
          if (d < hd) mine[2 + d] = qacc[g];
        }
      }
    }
    if (used == 1) return;
  } else {
    if (used == 1) {
      // The merge of one split: weight exp(m - m) = 1 (0 for m = -inf), then the division.
      if (active) {
        const float big = fmaxf(-__int_as_float(0x7f800000), m);
        const float w = m == -__int_as_float(0x7f800000) ? 0.0f : expf(m - big);
        const float inv = 1.0f / (0.0f + l * w);
        float* o = out + (r * n_heads + h) * head_dim;
#pragma unroll
        for (int g = 0; g < kGqaDimGroups; ++g) {
          const int d = 4 * lane + 128 * g;
          if (d < hd) {
            o[d] = (0.0f + acc[g].x * w) * inv;
            o[d + 1] = (0.0f + acc[g].y * w) * inv;
            o[d + 2] = (0.0f + acc[g].z * w) * inv;
            o[d + 3] = (0.0f + acc[g].w * w) * inv;
          }
        }
      }
      return;
    }
    if (active) {
      float* mine = partial + ((r * n_heads + h) * kSplits + split) * (head_dim + 2);
      if (lane == 0) {
        mine[0] = m;
        mine[1] = l;
      }
#pragma unroll
      for (int g = 0; g < kGqaDimGroups; ++g) {
        const int d = 4 * lane + 128 * g;
        if (d < hd) {
          mine[2 + d] = acc[g].x;
          mine[3 + d] = acc[g].y;
          mine[4 + d] = acc[g].z;
          mine[5 + d] = acc[g].w;
        }
      }
    }
  }
  // The last of the `used` blocks of (row, KV head, head group) u merges them for every head of
  // the block (whichever it is, it reads the same partials in the same order) and sets the
  // counter back to 0 for the next call.
  if (!last_to_finish(counters + u, used)) return;
  if (active)
    merge_splits(partial + (r * n_heads + h) * kSplits * (head_dim + 2), head_dim, used,
                 out + (r * n_heads + h) * head_dim, lane, 32);
  if (threadIdx.x == 0) counters[u] = 0;
}

// DRAMA_CUDA_ATTENTION: "v1" for the block per (row, query head); unset, empty or "v2" for the
// shared-KV kernel.
const char* attention_environment() {
  const char* v = std::getenv("DRAMA_CUDA_ATTENTION");
  return v ? v : "";
}
std::atomic<int> g_attention_version{std::string(attention_environment()) == "v1" ? 1 : 2};

// DRAMA_CUDA_ATTENTION_QUAD: unset or empty, version 2 in its quad layout where its blocks take 2
// heads (few rows: rows x KV heads < 132); 0, never; 1, always. Held as -1 for the first.
const char* attention_quad_environment() {
  const char* v = std::getenv("DRAMA_CUDA_ATTENTION_QUAD");
  return v ? v : "";
}
std::atomic<int> g_attention_quad{[] {
  const std::string v = attention_quad_environment();
  return v == "0" ? 0 : v == "1" ? 1 : -1;
}()};

}  // namespace

int64_t attention_partial_floats(int64_t rows, int64_t n_heads, int64_t head_dim) {
  return rows * n_heads * kSplits * (head_dim + 2);
}

int attention_version() {
  return g_attention_version.load(std::memory_order_relaxed);
}

int set_attention_version_flag(int version) {
  if (version != 1 && version != 2)
    throw Error("attention version " + std::to_string(version) + ": 1 or 2");
  return g_attention_version.exchange(version, std::memory_order_relaxed);
}

int set_attention_quad_flag(int quad) {
  if (quad < -1 || quad > 1)
    throw Error("attention quad layout " + std::to_string(quad) + ": -1, 0 or 1");
  return g_attention_quad.exchange(quad, std::memory_order_relaxed);
}

void check_attention_environment() {
  const std::string quad = attention_quad_environment();
  if (!quad.empty() && quad != "0" && quad != "1")
    throw Error("DRAMA_CUDA_ATTENTION_QUAD=" + quad + ": 0 or 1");
  const std::string v = attention_environment();
  if (!v.empty() && v != "v1" && v != "v2") throw Error("DRAMA_CUDA_ATTENTION=" + v + ": v1 or v2");
}

void launch_attention(const float* q, int64_t rows, const int32_t* positions,
                      const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                      float* out, float* partial, unsigned* counters, cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxHeadDim)
    throw Error("CUDA attention supports head_dim up to " + std::to_string(kMaxHeadDim) + ", not " +
                std::to_string(head_dim) + ".");
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const bool aligned = (reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k_cache) |
                        reinterpret_cast<uintptr_t>(v_cache)) %
                           16 ==
                       0;
  // The most chunks a row's span can hold: a span of at most `window` positions holds at most
  // window / kChunk (rounded up); with no window, every split of either version is launched
  // (version 1's split s takes chunks s, s + kSplits, ...; version 2's a run of kGqaRun or more).
  // The blocks of splits past that could never hold a chunk (at 256 lanes of bench-30b-a3b, a
  // context of 256: 2 of 16, and at least 28672 of 32768 blocks returned at once, each after
  // taking a block's shared memory: results/ncu-attention-lanes256-h100-1838.json).
  const int64_t every = int64_t{kSplits} * kGqaRun;
  const int64_t most_chunks = window > 0 ? std::min((window + kChunk - 1) / kChunk, every) : every;
  // Version 2 where its 16-byte copies apply (head_dim % 4 == 0, aligned operands); version 1
  // for any other shape.
  if (attention_version() == 2 && head_dim % 4 == 0 && aligned) {
    // Query heads per block: all of a KV head's (up to kGqaHeads) where the rows make a block
    // for every SM (132 on the H200) that way, else 2 (more, smaller blocks for a few rows). No
    // head's arithmetic depends on it: a row's bits are the same in any batch.
    const int64_t group = n_heads / n_kv_heads;
    const int most = rows * n_kv_heads >= 132 ? kGqaHeads : 2;
    const int heads = static_cast<int>(group < most ? group : most);
    const int64_t head_groups = (group + heads - 1) / heads;
    const int64_t bytes = gqa_shared_floats(heads, head_dim) * static_cast<int64_t>(sizeof(float));
    // At most most_chunks / kGqaRun splits (rounded up: gqa_run is at least kGqaRun).
    const dim3 grid(static_cast<unsigned>(rows * n_kv_heads * head_groups),
                    static_cast<unsigned>((most_chunks + kGqaRun - 1) / kGqaRun));
    // The quad layout (the same bits) where the blocks are few: where they take 2 heads. Each
    // instantiation keeps its own shared-memory allowance.
    const int quad_setting = g_attention_quad.load(std::memory_order_relaxed);
    const bool quad = quad_setting < 0 ? most == 2 : quad_setting > 0;
    static std::atomic<int64_t> allowed[2] = {0, 0};
    const auto kernel = quad ? attention_gqa_kernel<true> : attention_gqa_kernel<false>;
    allow_shared(kernel, bytes, allowed[quad], quad ? "attention v2 (quad)" : "attention v2");
    launch(kernel, grid, (quad ? 128 : 32) * heads, static_cast<size_t>(bytes), stream, q,
           positions, cache_row0, k_cache, v_cache, n_heads, n_kv_heads, head_dim, window, scale,
           heads, partial, counters, out);
    check_launch(quad ? "attention (quad)" : "attention");
    return;
  }
  const dim3 grid(static_cast<unsigned>(rows * n_heads),
                  static_cast<unsigned>(std::min<int64_t>(most_chunks, kSplits)));
  launch(attention_split_kernel, grid, kThreads, 0, stream, q, positions, cache_row0, k_cache,
         v_cache, n_heads, n_kv_heads, head_dim, window, scale, partial, counters, out);
  check_launch(attention_version() == 2 ? "attention (v1 shape)" : "attention v1");
}

void CudaBackend::attention(const float* q, int64_t rows, const int32_t* positions,
                            const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                            int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                            float* out) {
  float* partial = static_cast<float*>(scratch(
      static_cast<size_t>(attention_partial_floats(rows, n_heads, head_dim)) * sizeof(float)));
  unsigned* done = counters(static_cast<size_t>(rows * n_heads));
  launch_attention(q, rows, positions, cache_row0, k_cache, v_cache, n_heads, n_kv_heads, head_dim,
                   window, out, partial, done, stream_);
}

}  // namespace drama::cuda

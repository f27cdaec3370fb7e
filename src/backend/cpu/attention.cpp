// Grouped-query attention over per-row KV caches (spec section 1). Work is split by
// (row, head): each output vector is computed by one thread with scores (each a fixed-order
// vectorised dot product), a max-subtracted float32 softmax and the weighted sum of values, all in
// increasing cache position order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "util/stack_or_heap.h"

namespace drama::cpu {

namespace {

// One (row, head) output: scores over cache positions [first, last], softmax, weighted values.
// q . k runs in a fixed order that vectorises: 16 running sums (lane d % 16), a fixed pairwise
// tree over the lanes, then the tail. The source fixes every operation's order, so the clones
// for each instruction set (target_clones) compute identical bits; only their speed differs.
__attribute__((target_clones("avx512f", "avx2", "default"))) void attend_one(
    const float* qv, const float* k_cache, const float* v_cache, int64_t kv_stride,
    int64_t head_dim, int64_t first, int64_t last, float scale, float* p, float* o) {
  constexpr int kLanes = 16;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = first; j <= last; ++j) {
    const float* kv = k_cache + j * kv_stride;
    float lane[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= head_dim; d += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += qv[d + l] * kv[d + l];
    for (int width = kLanes / 2; width >= 1; width /= 2)
      for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
    float dot = lane[0];
    for (; d < head_dim; ++d) dot += qv[d] * kv[d];
    p[j - first] = dot * scale;
    max = std::max(max, p[j - first]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j <= last - first; ++j) {
    p[j] = std::exp(p[j] - max);
    sum += p[j];
  }
  for (int64_t d = 0; d < head_dim; ++d) o[d] = 0.0f;
  for (int64_t j = first; j <= last; ++j) {
    const float* vv = v_cache + j * kv_stride;
    const float e = p[j - first];
    for (int64_t d = 0; d < head_dim; ++d) o[d] += e * vv[d];
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < head_dim; ++d) o[d] *= inv;
}

}  // namespace

void CpuBackend::attention(const float* q, int64_t rows, const int32_t* positions,
                           const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                           int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                           float* out) {
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t kv_stride = n_kv_heads * head_dim;
  // Work per (row, head): the keys and values it reads, over the longest span in the call.
  int64_t span = 1;
  for (int64_t r = 0; r < rows; ++r)
    span = std::max<int64_t>(
        span, window > 0 ? std::min<int64_t>(window, positions[r] + 1) : positions[r] + 1);
  const double item_work = static_cast<double>(span * head_dim) * 8;
  pool_.parallel_for(rows * n_heads, 1, item_work, [&](int64_t t0, int64_t t1) {
    // This chunk's scores: on the stack up to 8192 positions (no allocation in a step), on the
    // heap past that.
    StackOrHeap<float, 8192> scores(static_cast<size_t>(span));
    float* p = scores.data();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / n_heads, h = t % n_heads, kvh = h / group;
      const int64_t last = positions[r];
      const int64_t first = window > 0 ? std::max<int64_t>(0, last - window + 1) : 0;
      const int64_t base = (cache_row0 ? cache_row0[r] : 0) * kv_stride + kvh * head_dim;
      attend_one(q + t * head_dim, k_cache + base, v_cache + base, kv_stride, head_dim, first, last,
                 scale, p, out + t * head_dim);
    }
  });
}

}  // namespace drama::cpu

// Mixture-of-experts routing and combination (spec sections 1 and 5). Routing is by ORIGINAL
// expert id: the softmax sums exp terms in increasing original id order, so a pruned layer gives
// bitwise the probabilities of the unpruned layer whose removed experts have -inf logits (their
// exp terms are exactly +0 and adding +0 changes nothing).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "util/error.h"

namespace drama::cpu {

void CpuBackend::route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                            const int32_t* logit_column, const int32_t* original_id,
                            int64_t n_stored, int64_t k, bool norm_topk, int32_t* expert_index,
                            float* weight) {
  std::vector<int32_t> by_id(n_stored);
  std::iota(by_id.begin(), by_id.end(), 0);
  std::sort(by_id.begin(), by_id.end(),
            [&](int32_t a, int32_t b) { return original_id[a] < original_id[b]; });
  pool_.parallel_for(rows, 1, static_cast<double>(n_stored) * 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> prob(n_stored);
    std::vector<int32_t> rank(n_stored);
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits + r * logit_stride;
      float max = -INFINITY;
      for (int64_t s = 0; s < n_stored; ++s) max = std::max(max, l[logit_column[s]]);
      float sum = 0.0f;
      for (int32_t s : by_id) {
        prob[s] = std::exp(l[logit_column[s]] - max);
        sum += prob[s];
      }
      for (auto& p : prob) p /= sum;
      // Rank by probability, ties to the lower original id.
      std::iota(rank.begin(), rank.end(), 0);
      std::partial_sort(rank.begin(), rank.begin() + k, rank.end(), [&](int32_t a, int32_t b) {
        return prob[a] > prob[b] || (prob[a] == prob[b] && original_id[a] < original_id[b]);
      });
      float kept = 0.0f;
      for (int64_t j = 0; j < k; ++j) kept += prob[rank[j]];
      for (int64_t j = 0; j < k; ++j) {
        expert_index[r * k + j] = rank[j];
        weight[r * k + j] = norm_topk ? prob[rank[j]] / kept : prob[rank[j]];
      }
    }
  });
}

void CpuBackend::moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x,
                             int64_t rows, int64_t hidden, const int32_t* expert_index, int64_t k,
                             int64_t out_slots, float* out, float* workspace) {
  if (rows <= 0) return;
  const int64_t H = hidden, inter = experts[0].gate.out, pairs = rows * k;
  // (row, rank) pairs grouped by stored expert, in row then rank order within an expert. The
  // index lives in this backend's memory; reading it here is no transfer.
  std::vector<int64_t> count(n_stored + 1, 0), order(pairs);
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t s = expert_index[p];
    if (s < 0 || s >= n_stored) throw Error("MoE routing returned an invalid expert index");
    ++count[s + 1];
  }
  for (int64_t s = 0; s < n_stored; ++s) count[s + 1] += count[s];
  std::vector<int64_t> next(count.begin(), count.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) order[next[expert_index[p]]++] = p;
  float* gin = workspace;
  float* g = gin + pairs * H;
  float* u = g + pairs * inter;
  float* a = u + pairs * inter;
  float* gout = a + pairs * inter;
  uint64_t bytes = 0;
  for (int64_t s = 0; s < n_stored; ++s) {
    const int64_t p0 = count[s], n = count[s + 1] - p0;
    if (n == 0) continue;
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(gin + i * H, x + (order[p0 + i] / k) * H, static_cast<size_t>(H) * sizeof(float));
    const ExpertWeights& e = experts[s];
    linear(e.gate, gin, n, g);
    linear(e.up, gin, n, u);
    swiglu(g, u, n * inter, a);
    linear(e.down, a, n, gout);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = order[p0 + i], r = p / k, j = p % k;
      std::memcpy(out + (r * out_slots + j) * H, gout + i * H,
                  static_cast<size_t>(H) * sizeof(float));
    }
    bytes += weight_bytes(e.gate) + weight_bytes(e.up) + weight_bytes(e.down);
  }
  count_expert_weight_bytes(bytes);
}

void CpuBackend::expert_combine(const float* expert_out, const float* weight, int64_t rows,
                                int64_t k, int64_t dim, float* y) {
  pool_.parallel_for(rows, 1, static_cast<double>(k * dim) * 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * dim;
      for (int64_t j = 0; j < k; ++j) {
        const float wj = weight[r * k + j];
        const float* e = expert_out + (r * k + j) * dim;
        for (int64_t d = 0; d < dim; ++d) yr[d] += wj * e[d];
      }
    }
  });
}

}  // namespace drama::cpu

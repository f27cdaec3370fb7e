// Mixture-of-experts routing and combination (spec sections 1 and 5). Routing is by ORIGINAL
// expert id: the softmax sums exp terms in increasing original id order, so a pruned layer gives
// bitwise the probabilities of the unpruned layer whose removed experts have -inf logits (their
// exp terms are exactly +0 and adding +0 changes nothing).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/activations.h"
#include "backend/cpu/cpu_backend.h"
#include "util/error.h"

namespace drama::cpu {

void CpuBackend::route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                            const int32_t* logit_column, const int32_t* original_id,
                            int64_t n_stored, int64_t k, bool norm_topk, int32_t* expert_index,
                            float* weight) {
  // The caller's scratch, kept (no allocation inside a step; workers read it through this
  // reference: a thread_local's name would name the worker's own); each thread's prob and rank
  // come from its own kernel scratch (CpuBackend::thread_scratch).
  thread_local std::vector<int32_t> by_id_storage;
  std::vector<int32_t>& by_id = by_id_storage;
  by_id.resize(static_cast<size_t>(n_stored));
  std::iota(by_id.begin(), by_id.end(), 0);
  std::sort(by_id.begin(), by_id.end(),
            [&](int32_t a, int32_t b) { return original_id[a] < original_id[b]; });
  pool_.parallel_for(rows, 1, static_cast<double>(n_stored) * 64, [&](int64_t r0, int64_t r1) {
    Scratch& sc = thread_scratch(static_cast<size_t>(n_stored), static_cast<size_t>(n_stored), 0);
    float* prob = sc.f.data();
    int32_t* rank = sc.i.data();
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits + r * logit_stride;
      float max = -INFINITY;
      for (int64_t s = 0; s < n_stored; ++s) max = std::max(max, l[logit_column[s]]);
      float sum = 0.0f;
      for (int32_t s : by_id) {
        prob[s] = std::exp(l[logit_column[s]] - max);
        sum += prob[s];
      }
      for (int64_t s = 0; s < n_stored; ++s) prob[s] /= sum;
      // Rank by probability, ties to the lower original id.
      std::iota(rank, rank + n_stored, 0);
      std::partial_sort(rank, rank + k, rank + n_stored, [&](int32_t a, int32_t b) {
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
  // Scratch reused across calls. Workers read it through these references: a thread_local's name
  // would name the worker's own (empty) copy.
  thread_local std::vector<int64_t> count_storage, order_storage, next_storage;
  std::vector<int64_t>& count = count_storage;
  std::vector<int64_t>& order = order_storage;
  std::vector<int64_t>& next = next_storage;
  count.assign(static_cast<size_t>(n_stored + 1), 0);
  order.resize(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t s = expert_index[p];
    if (s < 0 || s >= n_stored) throw Error("MoE routing returned an invalid expert index");
    ++count[s + 1];
  }
  for (int64_t s = 0; s < n_stored; ++s) count[s + 1] += count[s];
  next.assign(count.begin(), count.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) order[next[expert_index[p]]++] = p;
  float* gin = workspace;
  float* g = gin + pairs * H;
  float* u = g + pairs * inter;
  float* a = u + pairs * inter;
  float* gout = a + pairs * inter;

  // The experts that run, each over its pairs [p0, p0 + n), with their inputs gathered and
  // prepared (once for gate and up when both read the same layout).
  struct Run {
    const ExpertWeights* e;
    int64_t p0, n;
    const float *x_gate, *x_up, *x_down;
  };
  thread_local std::vector<Run> runs_storage;
  std::vector<Run>& runs = runs_storage;
  thread_local std::vector<float> prep_gate, prep_up, prep_down;
  runs.clear();
  uint64_t bytes = 0;
  // Prepared rows are laid out for the widest layout a weight of that input size can need.
  const int64_t stride_h = prepared_floats({WeightFormat::NVFP4, 0, H});
  const int64_t stride_i = prepared_floats({WeightFormat::NVFP4, 0, inter});
  float* xg = aligned_floats(prep_gate, static_cast<size_t>(pairs * stride_h));
  float* xu = aligned_floats(prep_up, static_cast<size_t>(pairs * stride_h));
  float* xd = aligned_floats(prep_down, static_cast<size_t>(pairs * stride_i));
  for (int64_t s = 0; s < n_stored; ++s) {
    const int64_t p0 = count[s], n = count[s + 1] - p0;
    if (n == 0) continue;
    const ExpertWeights& e = experts[s];
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(gin + (p0 + i) * H, x + (order[p0 + i] / k) * H,
                  static_cast<size_t>(H) * sizeof(float));
    Run run{&e, p0, n, nullptr, nullptr, nullptr};
    run.x_gate = prepare_activations(e.gate, gin + p0 * H, n, xg + p0 * stride_h);
    run.x_up = e.up.format == e.gate.format
                   ? run.x_gate
                   : prepare_activations(e.up, gin + p0 * H, n, xu + p0 * stride_h);
    runs.push_back(run);
    bytes += weight_bytes(e.gate) + weight_bytes(e.up) + weight_bytes(e.down);
  }

  // Every chosen expert's products in one parallel loop over (expert, 16-column group) units,
  // the experts one after another: a thread takes a contiguous share of all experts' columns
  // instead of each small product being split on its own (one fork/join for gate, up and SwiGLU,
  // one for down, per layer). A unit computes its columns for all of its expert's rows, so every
  // output element is the value linear() gives.
  constexpr int64_t kUnit = 16;
  const int64_t n_runs = static_cast<int64_t>(runs.size());
  const double rows_per_run = static_cast<double>(pairs) / static_cast<double>(n_runs);
  auto for_units = [&](int64_t columns, double unit_work, auto&& columns_of_run) {
    const int64_t units = (columns + kUnit - 1) / kUnit;
    pool_.parallel_for(n_runs * units, 1, unit_work, [&](int64_t t0, int64_t t1) {
      for (int64_t ri = t0 / units; ri < n_runs && ri * units < t1; ++ri) {
        const int64_t c0 = std::max(t0, ri * units) - ri * units;
        const int64_t c1 = std::min(t1, (ri + 1) * units) - ri * units;
        columns_of_run(runs[static_cast<size_t>(ri)], c0 * kUnit, std::min(columns, c1 * kUnit));
      }
    });
  };
  const auto rows_work = static_cast<int64_t>(rows_per_run + 0.5);
  const ExpertWeights& e0 = *runs.front().e;
  for_units(inter,
            kUnit * (linear_column_work(e0.gate, rows_work) + linear_column_work(e0.up, rows_work)),
            [&](const Run& run, int64_t o0, int64_t o1) {
              float* gr = g + run.p0 * inter;
              float* ur = u + run.p0 * inter;
              float* ar = a + run.p0 * inter;
              linear_columns(run.e->gate, run.x_gate, run.n, gr, o0, o1);
              linear_columns(run.e->up, run.x_up, run.n, ur, o0, o1);
              for (int64_t i = 0; i < run.n; ++i)
                for (int64_t o = o0; o < o1; ++o)
                  ar[i * inter + o] = silu_times(gr[i * inter + o], ur[i * inter + o]);
            });
  for (Run& run : runs)
    run.x_down =
        prepare_activations(run.e->down, a + run.p0 * inter, run.n, xd + run.p0 * stride_i);
  for_units(H, kUnit * linear_column_work(e0.down, rows_work),
            [&](const Run& run, int64_t o0, int64_t o1) {
              float* yr = gout + run.p0 * H;
              linear_columns(run.e->down, run.x_down, run.n, yr, o0, o1);
              for (int64_t i = 0; i < run.n; ++i) {
                const int64_t p = order[run.p0 + i], r = p / k, j = p % k;
                std::memcpy(out + (r * out_slots + j) * H + o0, yr + i * H + o0,
                            static_cast<size_t>(o1 - o0) * sizeof(float));
              }
            });
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

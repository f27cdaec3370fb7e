#include "util/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace drama {

int32_t sample_logits(std::span<const float> logits, float temperature, int32_t top_k, float top_p,
                      double u) {
  SampleScratch scratch;
  return sample_logits(logits, temperature, top_k, top_p, u, scratch);
}

void reserve_sample_scratch(SampleScratch& scratch, size_t vocab) {
  scratch.s.reserve(vocab);
  scratch.order.reserve(vocab);
  scratch.p.reserve(vocab);
}

int32_t sample_logits(std::span<const float> logits, float temperature, int32_t top_k, float top_p,
                      double u, SampleScratch& scratch) {
  const int32_t n = static_cast<int32_t>(logits.size());
  if (temperature <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  std::vector<float>& s = scratch.s;
  std::vector<int32_t>& order = scratch.order;
  std::vector<double>& p = scratch.p;
  s.resize(logits.size());
  for (int32_t i = 0; i < n; ++i) s[i] = logits[i] / temperature;
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), 0);
  int32_t keep = (top_k > 0 && top_k < n) ? top_k : n;
  auto by_score = [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_score);
  p.resize(static_cast<size_t>(keep));
  const double smax = s[order[0]];
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    p[i] = std::exp(static_cast<double>(s[order[i]]) - smax);
    total += p[i];
  }
  if (top_p < 1.0f) {
    const double want = static_cast<double>(top_p) * total;
    double run = 0.0;
    int32_t m = 0;
    while (m < keep) {
      run += p[m++];
      if (run >= want) break;
    }
    keep = std::max(m, 1);
    total = run;
  }
  const double target = u * total;
  double run = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    run += p[i];
    if (run > target) return order[i];
  }
  return order[keep - 1];
}

}  // namespace drama

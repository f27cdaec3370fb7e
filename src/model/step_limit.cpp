#include "model/step_limit.h"

#include <cmath>

namespace drama {

namespace {

double ceil_div(int64_t a, int64_t b) {
  return static_cast<double>((a + b - 1) / b);
}

}  // namespace

double expected_distinct_experts(int64_t experts, int64_t k, int64_t rows) {
  if (experts <= 0) return 0;
  const double p = static_cast<double>(std::min(k, experts)) / static_cast<double>(experts);
  return static_cast<double>(experts) * (1.0 - std::pow(1.0 - p, static_cast<double>(rows)));
}

double expected_expert_tiles(int64_t experts, int64_t k, int64_t rows, int64_t tile) {
  if (experts <= 0 || k <= 0 || rows <= 0 || tile <= 0) return 0;
  const double E = static_cast<double>(experts);
  if (k >= experts) return E * ceil_div(rows, tile);  // every row on every expert
  const double n = static_cast<double>(rows), p = static_cast<double>(k) / E;
  // E[ceil(n_e / tile)] with n_e ~ Binomial(rows, p), summed over the counts within 12 standard
  // deviations of the mean (plus a margin for small counts): what lies outside weighs < 1e-30.
  const double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(mean - 12 * sd - 16)));
  const int64_t hi = std::min<int64_t>(rows, static_cast<int64_t>(std::ceil(mean + 12 * sd + 16)));
  const double log_p = std::log(p), log_q = std::log1p(-p), log_n = std::lgamma(n + 1);
  double sum = 0;
  for (int64_t j = std::max<int64_t>(lo, 1); j <= hi; ++j) {
    const double x = static_cast<double>(j);
    const double log_pmf =
        log_n - std::lgamma(x + 1) - std::lgamma(n - x + 1) + x * log_p + (n - x) * log_q;
    sum += std::exp(log_pmf) * ceil_div(j, tile);
  }
  return E * sum;
}

double linear_mma_calls(int64_t out, int64_t in, int64_t rows) {
  return static_cast<double>(kMmaActivationTerms) * ceil_div(out, 16) * ceil_div(in, 16) *
         ceil_div(rows, 8);
}

double expert_mma_calls_per_tile(int64_t hidden, int64_t inter) {
  // gate and up (inter columns over hidden inputs), down (hidden columns over inter inputs).
  const double steps = 2 * ceil_div(inter, 16) * 8 * ceil_div(hidden, 128) +
                       ceil_div(hidden, 16) * 8 * ceil_div(inter, 128);
  return static_cast<double>(kMmaActivationTerms) * steps;
}

StepLimit step_limit(const Drama3Config& c, int64_t rows, const StepLimitInputs& in) {
  const auto& bb = c.backbone;
  const auto& t = c.tower;
  const TensorCoreProducts& tc = in.tensor_cores;
  const int64_t K = c.audio.num_codebooks, cs = c.audio.codebook_size;
  const int64_t H = bb.hidden_size, Ht = t.hidden_size;
  const int64_t E = c.moe.num_experts, k = std::min(c.moe.experts_per_token, c.moe.num_experts);
  const int64_t Ie = c.moe.expert_intermediate_size, Is = c.moe.shared_expert_intermediate_size;
  // Multiply-adds per row: all of them, and those at the FMA rate; mma calls of the whole step.
  double per_row = 0, fma_per_row = 0, mma = 0;
  // One product of out x in weights over the step's rows, `count` times.
  const auto product = [&](int64_t out, int64_t inputs, bool tensor, double count = 1) {
    const double macs = static_cast<double>(out) * static_cast<double>(inputs) * count;
    per_row += macs;
    if (tensor)
      mma += count * linear_mma_calls(out, inputs, rows);
    else
      fma_per_row += macs;
  };
  const auto attention_products = [&](const TransformerConfig& x, double count) {
    const int64_t q = x.num_heads * x.head_dim, kv = x.num_kv_heads * x.head_dim;
    product(q, x.hidden_size, tc.bf16_linear, count);
    product(kv, x.hidden_size, tc.bf16_linear, 2 * count);
    product(x.hidden_size, q, tc.bf16_linear, count);
  };
  const double q_dim = static_cast<double>(bb.num_heads * bb.head_dim);
  const double kv_dim = static_cast<double>(bb.num_kv_heads * bb.head_dim);
  // The routed experts' tiles of 8 pairs a MoE layer (tensor cores), expected under uniform
  // routing; the same for every layer.
  const double expert_tiles = tc.routed_experts ? expected_expert_tiles(E, k, rows, 8) : 0;
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < bb.num_layers; ++l) {
    attention_products(bb, 1);
    // Attention's scores and value sums (CUDA cores on CUDA): QK and PV over the positions.
    per_row += 2 * in.positions * q_dim;
    fma_per_row += 2 * in.positions * q_dim;
    if (c.is_dense_layer(l)) {
      product(bb.intermediate_size, H, tc.bf16_linear, 2);
      product(H, bb.intermediate_size, tc.bf16_linear);
      continue;
    }
    ++moe_layers;
    product(E, H, tc.bf16_linear);  // the router
    const double expert_macs = static_cast<double>(k) * 3 * static_cast<double>(H * Ie);
    per_row += expert_macs;
    if (tc.routed_experts)
      mma += expert_tiles * expert_mma_calls_per_tile(H, Ie);
    else
      fma_per_row += expert_macs;
    if (Is > 0) {
      product(Is, H, tc.shared_expert, 2);
      product(H, Is, tc.shared_expert);
      product(1, H, tc.shared_expert);  // its gate
    }
  }
  product(cs + 1, H, tc.bf16_linear);  // codebook-0 head
  // The tower: K positions per frame, each projected and through every layer; K-1 heads.
  const double Kd = static_cast<double>(K);
  product(Ht, H, tc.bf16_linear, Kd);
  for (int64_t l = 0; l < t.num_layers; ++l) {
    attention_products(t, Kd);
    product(t.intermediate_size, Ht, tc.bf16_linear, 2 * Kd);
    product(Ht, t.intermediate_size, tc.bf16_linear, Kd);
  }
  product(cs, Ht, tc.bf16_linear, static_cast<double>(K - 1));

  StepLimit s;
  const double R = static_cast<double>(rows);
  s.weight_bytes = in.weight_bytes;
  s.expert_bytes = in.experts_counted
                       ? 0.0
                       : static_cast<double>(moe_layers) * expected_distinct_experts(E, k, rows) *
                             in.bytes_per_expert;
  s.kv_bytes = R * in.positions * static_cast<double>(bb.num_layers) * 2 * kv_dim * 4;
  s.flops = 2.0 * R * per_row;
  s.fma_flops = 2.0 * R * fma_per_row;
  s.mma_flops = mma * kMmaFlops;
  const StepRates& r = in.rates;
  if (r.copy_bytes_per_s > 0)
    s.bytes_ms = (s.weight_bytes + s.expert_bytes + s.kv_bytes) / r.copy_bytes_per_s * 1e3;
  if (r.fma_flops_per_s > 0) s.fma_ms = s.fma_flops / r.fma_flops_per_s * 1e3;
  if (r.mma_flops_per_s > 0) s.mma_ms = s.mma_flops / r.mma_flops_per_s * 1e3;
  return s;
}

int64_t limit_streams(const Drama3Config& c, int64_t rows_per_lane, const StepLimitInputs& in,
                      int64_t most_lanes) {
  const double frame_ms = 1e3 / c.audio.frame_rate;
  int64_t n = 0;
  for (int64_t lanes = 1; lanes <= most_lanes; ++lanes) {
    if (step_limit(c, lanes * rows_per_lane, in).ms() > frame_ms) break;
    n = lanes;
  }
  return n;
}

double PairedRoofline::shared_experts_for(double goal) const {
  if (moe_layers <= 0 || bytes_per_expert <= 0) return 0;
  // Batch 1 reads experts_batch1 a layer, the pair 2 experts_batch1 - shared.
  const double extra =
      (goal - 1) * bytes_batch1 / (static_cast<double>(moe_layers) * bytes_per_expert);
  return std::clamp(experts_batch1 - extra, 0.0, experts_batch1);
}

PairedRoofline paired_roofline_uniform(const Drama3Config& c, double bytes_batch1,
                                       double bytes_per_expert) {
  PairedRoofline p;
  for (int64_t l = 0; l < c.backbone.num_layers; ++l)
    if (!c.is_dense_layer(l)) ++p.moe_layers;
  const int64_t E = c.moe.num_experts, k = c.moe.experts_per_token;
  p.bytes_per_expert = bytes_per_expert;
  p.experts_batch1 = static_cast<double>(std::min(k, E));
  p.experts_paired = expected_distinct_experts(E, k, 2);
  p.bytes_batch1 = bytes_batch1;
  p.bytes_paired = bytes_batch1 + static_cast<double>(p.moe_layers) *
                                      (p.experts_paired - p.experts_batch1) * bytes_per_expert;
  p.ratio = bytes_batch1 > 0 ? p.bytes_paired / bytes_batch1 : 0;
  return p;
}

}  // namespace drama

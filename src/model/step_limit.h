// The bound a decode step's time is measured against (`drama bench decode`): what a step of
// `rows` rows must move and compute, from the model's geometry, at the rates measured in the same
// run. Bytes at the copy rate; arithmetic split by the units that run it: the products a backend
// runs on tensor cores (CUDA: mma.sync m16n8k16, bfloat16 in, float32 accumulate) at the
// measured tensor-core rate, counting the mma the kernels issue (each float32 activation split
// into three bfloat16 terms, rows in tiles of 8), and the rest (attention's scores and value sums;
// every product on the CPU) at the measured float32 multiply-add rate.
#pragma once

#include <algorithm>
#include <cstdint>

#include "format/config.h"

namespace drama {

// Expected distinct experts that `rows` rows choose, k each of E, when routing is uniform (the
// synthetic model's random router): E (1 - (1 - k/E)^rows).
double expected_distinct_experts(int64_t experts, int64_t k, int64_t rows);

// Expected sum over the E experts of ceil(n_e / tile), where n_e is the number of rows that chose
// expert e, under uniform routing: each row takes k distinct experts of E, so n_e is
// Binomial(rows, k/E). For tile >= rows it equals expected_distinct_experts.
double expected_expert_tiles(int64_t experts, int64_t k, int64_t rows, int64_t tile);

// One mma.sync m16n8k16: 16 x 8 outputs, each a sum of 16 products.
inline constexpr double kMmaFlops = 2.0 * 16 * 8 * 16;
// mma per (16 weights x 16 inputs x 8 rows) tile: the float32 activation as three bfloat16 terms
// (src/backend/cuda/mma.cuh), each its own mma.
inline constexpr int64_t kMmaActivationTerms = 3;

// mma.sync calls of one BF16 product on tensor cores (src/backend/cuda/linear.cu): 16 output
// columns, 16 inputs and 8 rows a tile (the last of each padded), three mma a tile.
double linear_mma_calls(int64_t out, int64_t in, int64_t rows);
// mma.sync calls of one expert's gate, up and down products for one tile of 8 (row, expert)
// pairs on tensor cores (src/backend/cuda/moe.cu, version 3 in either layout): 16 output columns
// a tile, the inputs in groups of 128 (8 steps of 16, every step run), three mma a step.
double expert_mma_calls_per_tile(int64_t hidden, int64_t inter);

struct StepRates {
  double copy_bytes_per_s = 0;  // bytes read + written per second (one budget serves both)
  double fma_flops_per_s = 0;   // float32 multiply-adds (CPU cores, CUDA cores); 0: not measured
  double mma_flops_per_s = 0;   // tensor cores, mma.sync m16n8k16 bf16 -> f32; 0: not measured
};

// Which products the backend runs on tensor cores; the others, and all of them on the CPU, run at
// the multiply-add rate.
struct TensorCoreProducts {
  bool bf16_linear = false;     // BF16 `linear` (CUDA's default): attention projections, dense
                                // MLPs, router, codebook heads, the tower
  bool routed_experts = false;  // the grouped expert products (CUDA version 3: NVFP4 experts)
  bool shared_expert = false;   // a shared expert's products (BF16 ones under bf16_linear)
};

struct StepLimitInputs {
  double positions = 0;          // mean cached positions a decode row attends over, every layer
  double weight_bytes = 0;       // weight bytes a step reads by the workspace's counter
  bool experts_counted = false;  // weight_bytes holds the routed experts (the backend counts them)
  double bytes_per_expert = 0;   // gate + up + down of one routed expert
  StepRates rates;
  TensorCoreProducts tensor_cores;
};

struct StepLimit {
  // Bytes: the counted weights, the distinct experts the rows choose under uniform routing where
  // the backend does not count them, every row reading the KV cache (float32) of every layer.
  double weight_bytes = 0, expert_bytes = 0, kv_bytes = 0;
  double flops = 0;      // 2 x rows x the parameters a row uses (+ attention over the positions)
  double fma_flops = 0;  // the part of `flops` run at the multiply-add rate
  double mma_flops = 0;  // tensor-core flops issued (kMmaFlops an mma: padding and terms included)
  double bytes_ms = 0, fma_ms = 0, mma_ms = 0;  // each 0 where its rate is not measured
  // The products on tensor cores and on CUDA cores run in different kernels, one after another:
  // their times add.
  double flops_ms() const { return fma_ms + mma_ms; }
  double ms() const { return std::max(bytes_ms, flops_ms()); }
};

StepLimit step_limit(const Drama3Config& c, int64_t rows, const StepLimitInputs& in);

// The most lanes of `rows_per_lane` rows each (paired guidance: 2) whose step the limit allows
// within one frame of audio (1 / frame_rate), searched from 1 to `most_lanes`; 0 when not one.
int64_t limit_streams(const Drama3Config& c, int64_t rows_per_lane, const StepLimitInputs& in,
                      int64_t most_lanes = 65536);

// The copy-rate roofline of paired guidance's batch of 2 against batch 1's: the same weights but
// the experts, of which two rows read the distinct ones they choose, expected under uniform
// routing (the synthetic model's random router: the branches choose nearly independently).
struct PairedRoofline {
  int64_t moe_layers = 0;
  double bytes_per_expert = 0;
  double experts_batch1 = 0;  // per MoE layer: min(experts_per_token, num_experts)
  double experts_paired = 0;  // per MoE layer, expected under uniform routing
  double bytes_batch1 = 0, bytes_paired = 0;
  double ratio = 0;  // bytes_paired / bytes_batch1: the paired step's floor over batch 1's
  // Experts per MoE layer the branches must share (of experts_batch1) for the paired roofline to
  // be within `goal` x batch 1's (0 when they may choose apart).
  double shared_experts_for(double goal) const;
};

// `bytes_batch1`: batch 1's weight bytes per step, min(k, E) experts per MoE layer included.
PairedRoofline paired_roofline_uniform(const Drama3Config& c, double bytes_batch1,
                                       double bytes_per_expert);

}  // namespace drama

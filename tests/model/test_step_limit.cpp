// The decode step's bound (model/step_limit.h, `drama bench decode`'s limit) against figures
// computed by hand on a small geometry, and the bench-30b-a3b figures docs/cuda-backend.md quotes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "format/config.h"
#include "model/step_limit.h"

namespace drama {
namespace {

// Backbone: H 32, 2 layers (0 dense, intermediate 64; 1 MoE: 4 experts, 2 a token, intermediate
// 16), 2 query heads and 1 KV head of 16. Tower: H 16, 1 layer, 1 head of 16, intermediate 32.
// 2 codebooks of 16 codes, 12.5 frames a second (80 ms).
Drama3Config small_config() {
  Drama3Config c;
  c.audio.num_codebooks = 2;
  c.audio.codebook_size = 16;
  c.audio.frame_rate = 12.5;
  c.backbone.hidden_size = 32;
  c.backbone.num_layers = 2;
  c.backbone.num_heads = 2;
  c.backbone.num_kv_heads = 1;
  c.backbone.head_dim = 16;
  c.backbone.intermediate_size = 64;
  c.moe.num_experts = 4;
  c.moe.experts_per_token = 2;
  c.moe.expert_intermediate_size = 16;
  c.moe.shared_expert_intermediate_size = 0;
  c.moe.dense_layers = {0};
  c.tower.hidden_size = 16;
  c.tower.num_layers = 1;
  c.tower.num_heads = 1;
  c.tower.num_kv_heads = 1;
  c.tower.head_dim = 16;
  c.tower.intermediate_size = 32;
  return c;
}

// 1000 counted weight bytes, 100 bytes an expert, 10 cached positions a row.
StepLimitInputs small_inputs() {
  StepLimitInputs in;
  in.positions = 10;
  in.weight_bytes = 1000;
  in.experts_counted = false;
  in.bytes_per_expert = 100;
  in.rates.copy_bytes_per_s = 1e6;
  return in;
}

// Multiply-adds a row of the small config uses:
//   backbone attention projections 32 x (2 x 32 + 2 x 16) = 3072 a layer, x 2 layers = 6144
//   attention over 10 positions: 2 x 10 x 32 = 640 a layer, x 2 = 1280
//   the dense MLP 3 x 32 x 64 = 6144; the router 4 x 32 = 128; 2 experts 2 x 3 x 32 x 16 = 3072
//   codebook-0 head 17 x 32 = 544
//   the tower, 2 positions: (16 x 32 + 16 x 64 + 3 x 16 x 32) = 3072 each, 6144; 1 head 16 x 16
// 6144 + 1280 + 6144 + 128 + 3072 + 544 + 6144 + 256 = 23712, i.e. 47424 flops a row.
constexpr double kFlopsPerRow = 47424;
constexpr double kAttentionFlopsPerRow = 2 * 1280;

TEST(StepLimit, ExpectedDistinctExpertsAndTilesUnderUniformRouting) {
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 1), 2.0);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 2), 3.0);  // 4 (1 - 1/4)
  EXPECT_DOUBLE_EQ(expected_distinct_experts(128, 8, 2), 15.5);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 9, 3), 4.0);  // k past E: every expert
  // Up to 8 rows an expert's tile count is 1 when chosen: the distinct experts.
  for (int64_t rows : {1, 2, 5, 8})
    EXPECT_NEAR(expected_expert_tiles(4, 2, rows, 8), expected_distinct_experts(4, 2, rows), 1e-12)
        << rows;
  // 9 rows, n_e ~ Binomial(9, 1/2): ceil(n/8) is 1 for n in 1..8 and 2 for n = 9, so
  // E[ceil(n/8)] = (1 - 2^-9) + 2^-9 = 1 an expert.
  EXPECT_NEAR(expected_expert_tiles(4, 2, 9, 8), 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(expected_expert_tiles(4, 4, 17, 8), 4.0 * 3);  // every row on every expert
  // Many rows: at least the pairs over 8, less than that plus one tile an expert.
  const double many = expected_expert_tiles(128, 8, 1000, 8);
  EXPECT_GE(many, 1000.0 * 8 / 8);
  EXPECT_LT(many, 1000.0 * 8 / 8 + 128);
}

TEST(StepLimit, MmaCallsOfTheTensorCoreKernels) {
  // linear.cu: 16 columns x 16 inputs x 8 rows a tile (padded), three activation terms.
  EXPECT_DOUBLE_EQ(linear_mma_calls(32, 32, 1), 3 * 2 * 2 * 1);
  EXPECT_DOUBLE_EQ(linear_mma_calls(17, 32, 9), 3 * 2 * 2 * 2);
  // moe.cu version 3: inputs in groups of 128 (8 steps), gate and up and down.
  EXPECT_DOUBLE_EQ(expert_mma_calls_per_tile(32, 16), 3 * 8 * (2 * 1 * 1 + 2 * 1));
  // bench-30b-a3b's experts (2048 -> 768 -> 2048): 3 x 8 x (2 x 48 x 16 + 128 x 6), which is 8
  // pairs x 3 terms x 3 x 2048 x 768 multiply-adds at 2048 a call: no padding at that shape.
  EXPECT_DOUBLE_EQ(expert_mma_calls_per_tile(2048, 768), 55296);
  EXPECT_DOUBLE_EQ(expert_mma_calls_per_tile(2048, 768) * kMmaFlops / 2, 8.0 * 3 * 3 * 2048 * 768);
}

TEST(StepLimit, BytesTermWithTheExpertsOfOneAndTwoRows) {
  const Drama3Config c = small_config();
  StepLimitInputs in = small_inputs();
  // One row: 2 experts of 4 in the one MoE layer; KV 10 positions x 2 layers x (K and V of 16
  // floats) x 4 bytes = 2560.
  StepLimit one = step_limit(c, 1, in);
  EXPECT_DOUBLE_EQ(one.weight_bytes, 1000);
  EXPECT_DOUBLE_EQ(one.expert_bytes, 200);
  EXPECT_DOUBLE_EQ(one.kv_bytes, 2560);
  EXPECT_DOUBLE_EQ(one.bytes_ms, (1000 + 200 + 2560) / 1e6 * 1e3);
  // Two rows: 3 distinct experts expected (4 (1 - (1/2)^2)), twice the KV reads.
  StepLimit two = step_limit(c, 2, in);
  EXPECT_DOUBLE_EQ(two.expert_bytes, 300);
  EXPECT_DOUBLE_EQ(two.kv_bytes, 5120);
  EXPECT_DOUBLE_EQ(two.bytes_ms, (1000 + 300 + 5120) / 1e6 * 1e3);
  // A backend that counts its experts: none added.
  in.experts_counted = true;
  EXPECT_DOUBLE_EQ(step_limit(c, 2, in).expert_bytes, 0);
}

TEST(StepLimit, NoRatesMeasuredLeaveTheFlopsTermZero) {
  const Drama3Config c = small_config();
  StepLimitInputs in = small_inputs();
  in.tensor_cores = {true, true, true};
  const StepLimit s = step_limit(c, 1, in);
  EXPECT_DOUBLE_EQ(s.flops, kFlopsPerRow);
  EXPECT_GT(s.mma_flops, 0);
  EXPECT_DOUBLE_EQ(s.flops_ms(), 0);
  EXPECT_DOUBLE_EQ(s.ms(), s.bytes_ms);
}

TEST(StepLimit, OnTheCpuEveryFlopIsAtTheMultiplyAddRate) {
  const Drama3Config c = small_config();
  StepLimitInputs in = small_inputs();
  in.rates.fma_flops_per_s = 47424e3;  // one row's flops in 1 ms
  in.rates.mma_flops_per_s = 1e15;     // ignored: no product on tensor cores
  const StepLimit s = step_limit(c, 2, in);
  EXPECT_DOUBLE_EQ(s.flops, 2 * kFlopsPerRow);
  EXPECT_DOUBLE_EQ(s.fma_flops, s.flops);
  EXPECT_DOUBLE_EQ(s.mma_flops, 0);
  EXPECT_DOUBLE_EQ(s.fma_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.mma_ms, 0);
  EXPECT_DOUBLE_EQ(s.ms(), std::max(s.bytes_ms, 2.0));
}

TEST(StepLimit, FlopsSplitBetweenTensorCoresAndCudaCores) {
  const Drama3Config c = small_config();
  StepLimitInputs in = small_inputs();
  in.tensor_cores = {true, true, false};
  // mma calls at one row (every product one row tile):
  //   backbone q 32x32: 3 x 2 x 2 = 12, k and v 16x32: 6 each, o 12; 36 a layer, 72
  //   dense gate and up 64x32: 24 each, down 32x64: 24; the router 4x32: 6
  //   experts: 2 tiles (the 2 chosen experts) x 3 x 8 x (2 x 1 x 1 + 2 x 1) = 192
  //   codebook-0 head 17x32: 12
  //   tower, 2 positions of: input 16x32: 6, q/k/v/o 16x16: 3 each, gate and up 32x16: 6 each,
  //   down 16x32: 6 (36), 72; the head 16x16: 3
  // 72 + 72 + 6 + 192 + 12 + 72 + 3 = 429
  constexpr double kMmaOneRow = 429;
  in.rates.fma_flops_per_s = kAttentionFlopsPerRow * 1e3;  // the attention of a row in 1 ms
  in.rates.mma_flops_per_s = kMmaOneRow * kMmaFlops * 1e3 / 4;
  const StepLimit one = step_limit(c, 1, in);
  EXPECT_DOUBLE_EQ(one.flops, kFlopsPerRow);
  EXPECT_DOUBLE_EQ(one.fma_flops, kAttentionFlopsPerRow);  // attention's QK and PV alone
  EXPECT_DOUBLE_EQ(one.mma_flops, kMmaOneRow * kMmaFlops);
  EXPECT_DOUBLE_EQ(one.fma_ms, 1.0);
  EXPECT_DOUBLE_EQ(one.mma_ms, 4.0);
  EXPECT_DOUBLE_EQ(one.flops_ms(), 5.0);  // different kernels, one after another: the times add
  EXPECT_DOUBLE_EQ(one.ms(), std::max(one.bytes_ms, 5.0));
  // Two rows: the same row tiles, 3 experts' tiles expected instead of 2 (+96).
  EXPECT_DOUBLE_EQ(step_limit(c, 2, in).mma_flops, (kMmaOneRow + 96) * kMmaFlops);
  // Nine rows: two row tiles for every product (237 x 2), 4 experts' tiles (above) of 96.
  EXPECT_NEAR(step_limit(c, 9, in).mma_flops, (237 * 2 + 4 * 96) * kMmaFlops, 1e-6);
  // Experts on CUDA cores (versions 1 and 2): their multiply-adds at the FMA rate instead.
  in.tensor_cores.routed_experts = false;
  const StepLimit v2 = step_limit(c, 1, in);
  EXPECT_DOUBLE_EQ(v2.fma_flops, kAttentionFlopsPerRow + 2 * 3072);
  EXPECT_DOUBLE_EQ(v2.mma_flops, (kMmaOneRow - 192) * kMmaFlops);
}

TEST(StepLimit, SharedExpertProductsAreCounted) {
  Drama3Config c = small_config();
  c.moe.shared_expert_intermediate_size = 16;
  StepLimitInputs in = small_inputs();
  // 3 x 32 x 16 + its gate 1 x 32 = 1568 multiply-adds a row.
  EXPECT_DOUBLE_EQ(step_limit(c, 1, in).flops, kFlopsPerRow + 2 * 1568);
  in.tensor_cores.shared_expert = true;
  // gate and up 16x32: 6 each, down 32x16: 6, the gate 1x32: 6.
  EXPECT_DOUBLE_EQ(step_limit(c, 1, in).mma_flops, 24 * kMmaFlops);
}

TEST(StepLimit, StreamsSearchStopsAtTheFirstLaneCountPastOneFrame) {
  const Drama3Config c = small_config();
  StepLimitInputs in = small_inputs();
  // Bytes alone, paired (2 rows a lane): 1000 + 400 (1 - 4^-L) + 5120 L: 52600 at 10 lanes,
  // 57720 at 11 (to 1e-3). At 712500 bytes/s, 73.8 ms and 81.0 ms against the frame's 80 ms.
  in.rates.copy_bytes_per_s = 712500;
  EXPECT_EQ(limit_streams(c, 2, in), 10);
  EXPECT_LT(step_limit(c, 20, in).ms(), 80);
  EXPECT_GT(step_limit(c, 22, in).ms(), 80);
  // The flops term binding: 2L rows at 47424 flops a row against a rate that makes 10.25 lanes
  // one frame (10 lanes 78.0 ms, 11 lanes 85.9 ms).
  in.rates.copy_bytes_per_s = 1e12;
  in.rates.fma_flops_per_s = 2 * kFlopsPerRow * 10.25 / 0.080;
  EXPECT_EQ(limit_streams(c, 2, in), 10);
  EXPECT_EQ(limit_streams(c, 1, in), 20);    // one row a lane (no guidance): 20 rows 78.0 ms
  EXPECT_EQ(limit_streams(c, 2, in, 7), 7);  // the search's end
  in.rates.fma_flops_per_s = 1;              // not even one lane
  EXPECT_EQ(limit_streams(c, 2, in), 0);
}

TEST(StepLimit, PairedRooflineUnderUniformRouting) {
  const Drama3Config c = small_config();
  // Batch 1: 1000 bytes with its 2 experts of 100 in the one MoE layer; the pair reads 3.
  const PairedRoofline p = paired_roofline_uniform(c, 1000, 100);
  EXPECT_EQ(p.moe_layers, 1);
  EXPECT_DOUBLE_EQ(p.experts_batch1, 2);
  EXPECT_DOUBLE_EQ(p.experts_paired, 3);
  EXPECT_DOUBLE_EQ(p.bytes_paired, 1100);
  EXPECT_DOUBLE_EQ(p.ratio, 1.1);
  // Within 1.05x: at most 0.5 more experts than batch 1, so the branches share 1.5 of their 2.
  EXPECT_NEAR(p.shared_experts_for(1.05), 1.5, 1e-12);
  EXPECT_DOUBLE_EQ(p.shared_experts_for(1.3), 0);  // 3 more experts allowed: none shared
  EXPECT_DOUBLE_EQ(p.shared_experts_for(1.0), 2);
}

// The figures docs/cuda-backend.md quotes for configs/bench-30b-a3b.json.
TEST(StepLimit, Bench30bA3bFiguresOfTheDocs) {
  const char* dir = std::getenv("DRAMA_SOURCE_DIR");
  const Drama3Config c =
      load_drama3_config(std::string(dir ? dir : ".") + "/configs/bench-30b-a3b.json");
  auto bytes = [](WeightFormat f, int64_t out, int64_t in) {
    LinearWeight w;
    w.format = f;
    w.out = out;
    w.in = in;
    return static_cast<double>(weight_bytes(w));
  };
  const WeightFormat bf16 = WeightFormat::BF16, nvfp4 = WeightFormat::NVFP4;
  // Batch 1's weights as the synthetic bench counts them: q, k, v, o and the router of 48 layers
  // (BF16), the codebook-0 head, 8 NVFP4 experts a layer.
  const double per_expert = 2 * bytes(nvfp4, 768, 2048) + bytes(nvfp4, 2048, 768);
  const double layer = bytes(bf16, 4096, 2048) + 2 * bytes(bf16, 512, 2048) +
                       bytes(bf16, 2048, 4096) + bytes(bf16, 128, 2048);
  const double batch1 = 48 * layer + bytes(bf16, 2049, 2048) + 48 * 8 * per_expert;
  EXPECT_DOUBLE_EQ(batch1, 2864718336.0);
  const PairedRoofline p = paired_roofline_uniform(c, batch1, per_expert);
  EXPECT_DOUBLE_EQ(p.experts_paired, 15.5);
  EXPECT_NEAR(p.ratio, 1.3335, 1e-4);
  EXPECT_NEAR(p.shared_experts_for(1.1), 5.75, 0.01);
  // The lanes limit with the inputs of results/lanes-h200-1844.json (96 lanes: 2759856128 weight
  // bytes a step without the experts, 88.5 cached positions, copy 4242.0 GB/s, FMA 53.79
  // TFLOP/s): 327 streams with every flop at the FMA rate (what that receipt says), and with the
  // tensor-core products at the mma rate, for a few rates (none measured yet).
  StepLimitInputs in;
  in.positions = 88.5;
  in.weight_bytes = 2759856128.0;
  in.bytes_per_expert = per_expert;
  in.rates = {4242.026715530759e9, 53.79402648811902e12, 0};
  EXPECT_EQ(limit_streams(c, 2, in), 327);
  EXPECT_NEAR(step_limit(c, 192, in).ms(), 23.467178386857007, 1e-9);
  in.tensor_cores = {true, true, false};
  const struct {
    double tflops;
    int64_t streams;
  } rates[] = {{250, 488}, {500, 976}, {660, 1280}};
  for (const auto& r : rates) {
    in.rates.mma_flops_per_s = r.tflops * 1e12;
    EXPECT_EQ(limit_streams(c, 2, in), r.streams) << r.tflops;
  }
  // At 96 lanes the issued tensor-core flops are 3.50x the arithmetic of the products they run
  // (three terms, and the experts' tiles of 8 pairs partly empty at 12 pairs an expert).
  const StepLimit at96 = step_limit(c, 192, in);
  EXPECT_NEAR(at96.mma_flops / (at96.flops - at96.fma_flops), 3.499, 1e-3);
  // The bytes term alone (no flops rate): mostly the KV cache's reads by then.
  in.rates.fma_flops_per_s = in.rates.mma_flops_per_s = 0;
  EXPECT_EQ(limit_streams(c, 2, in), 9203);
}

}  // namespace
}  // namespace drama

// Routing (original-id softmax, top-k ties, pruned == unpruned with -inf), expert combine,
// guidance, sampling and the non-finite check of the CPU backend.
#include "cpu_test_util.h"

namespace drama::test {
namespace {

constexpr uint32_t kSeed = 5150;

TEST(CpuMoe, TopKTiesGoToLowerOriginalId) {
  cpu::CpuBackend be(1, cpu::Isa::Scalar);
  // Stored experts listed out of id order; experts 7 and 2 tie for first, 5 and 3 for third.
  const std::vector<int32_t> original = {7, 2, 5, 3};
  const std::vector<int32_t> column = {0, 1, 2, 3};
  const std::vector<float> logits = {1.0f, 1.0f, 0.5f, 0.5f};
  std::vector<int32_t> idx(3);
  std::vector<float> w(3);
  be.route_topk(logits.data(), 1, 4, column.data(), original.data(), 4, 3, false, idx.data(),
                w.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 0, 3}));  // ids 2, 7, 3
  const double e = std::exp(-0.5), total = 2 + 2 * e;
  EXPECT_NEAR(w[0], 1 / total, 1e-7);
  EXPECT_NEAR(w[2], e / total, 1e-7);
  be.route_topk(logits.data(), 1, 4, column.data(), original.data(), 4, 3, true, idx.data(),
                w.data());
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  EXPECT_NEAR(w[0], 1 / (2 + e), 1e-7);
}

// A pruned layer (kept ids, full-width router) gives bitwise the probabilities of the unpruned
// layer whose removed experts have -inf logits; a sliced router gives the same again.
TEST(CpuMoe, PrunedEqualsUnprunedWithMinusInf) {
  std::mt19937 rng(kSeed);
  const int64_t n = 16, rows = 7, k = 4;
  const std::vector<int32_t> kept = {0, 2, 3, 6, 9, 10, 14, 15};
  auto logits = random_floats(rng, rows * n, -4.0f, 4.0f);
  cpu::CpuBackend be(3, cpu::Isa::Scalar);
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  auto masked = logits;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < n; ++e)
      if (!std::count(kept.begin(), kept.end(), e)) masked[r * n + e] = -INFINITY;
  std::vector<int32_t> idx_full(rows * k), idx_pruned(rows * k), idx_sliced(rows * k);
  std::vector<float> w_full(rows * k), w_pruned(rows * k), w_sliced(rows * k);
  for (bool norm : {false, true}) {
    be.route_topk(masked.data(), rows, n, all.data(), all.data(), n, k, norm, idx_full.data(),
                  w_full.data());
    be.route_topk(logits.data(), rows, n, kept.data(), kept.data(), kept.size(), k, norm,
                  idx_pruned.data(), w_pruned.data());
    std::vector<float> sliced(rows * kept.size());
    std::vector<int32_t> cols(kept.size());
    std::iota(cols.begin(), cols.end(), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (size_t s = 0; s < kept.size(); ++s)
        sliced[r * kept.size() + s] = logits[r * n + kept[s]];
    be.route_topk(sliced.data(), rows, kept.size(), cols.data(), kept.data(), kept.size(), k, norm,
                  idx_sliced.data(), w_sliced.data());
    for (int64_t i = 0; i < rows * k; ++i) {
      ASSERT_EQ(idx_full[i], kept[idx_pruned[i]]);
      ASSERT_EQ(idx_pruned[i], idx_sliced[i]);
    }
    EXPECT_TRUE(bitwise_equal(w_full.data(), w_pruned.data(), w_full.size()));
    EXPECT_TRUE(bitwise_equal(w_full.data(), w_sliced.data(), w_full.size()));
  }
}

TEST(CpuMoe, ExpertCombineInRankOrder) {
  std::mt19937 rng(kSeed + 1);
  const int64_t rows = 3, k = 2, dim = 5;
  auto out = random_floats(rng, rows * k * dim), w = random_floats(rng, rows * k);
  auto y = random_floats(rng, rows * dim), y0 = y;
  cpu::CpuBackend(2, cpu::Isa::Scalar).expert_combine(out.data(), w.data(), rows, k, dim, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dim; ++d) {
      float want = y0[r * dim + d];
      for (int64_t j = 0; j < k; ++j) want += w[r * k + j] * out[(r * k + j) * dim + d];
      EXPECT_EQ(y[r * dim + d], want);
    }
}

// One row through the batched kernels (Backend::sample_rows, guidance_combine).
int32_t sample(Backend& be, const float* logits, int64_t vocab, const SamplingParams& p,
               uint64_t seed, uint64_t frame, uint64_t codebook) {
  const SampleRow row{p.temperature, p.top_k, p.top_p, 0, seed, frame};
  int32_t id = -1, flag = 0;
  be.sample_rows(logits, vocab, &row, 1, static_cast<int64_t>(codebook), &id, &flag, 1);
  EXPECT_EQ(flag, 0);
  return id;
}

bool has_non_finite(Backend& be, const float* x, int64_t n) {
  const SampleRow greedy{0.0f, 0, 1.0f, 0, 0, 0};
  int32_t id = -1, flag = 0;
  be.sample_rows(x, n, &greedy, 1, 4, &id, &flag, 1);
  if (flag != 0) {
    EXPECT_EQ(flag, 5);  // codebook + 1
  }
  return flag != 0;
}

TEST(CpuGuidance, CombineAndNonFinite) {
  cpu::CpuBackend be(1, cpu::Isa::Scalar);
  const std::vector<float> cu = {1.0f, 2.0f, -1.0f, 0.5f, 2.0f, 1.0f};  // cond row, uncond row
  std::vector<float> out(3);
  const GuidanceRow row{0, 1, 1.5f};
  be.guidance_combine(cu.data(), 3, &row, 1, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.25f, 2.0f, -2.0f}));
  EXPECT_FALSE(has_non_finite(be, out.data(), 3));
  out[1] = NAN;
  EXPECT_TRUE(has_non_finite(be, out.data(), 3));
  out[1] = -INFINITY;
  EXPECT_TRUE(has_non_finite(be, out.data(), 3));
  EXPECT_FALSE(has_non_finite(be, out.data(), 1));
}

TEST(CpuSampling, GreedyTopKOneAndSeeds) {
  std::mt19937 rng(kSeed + 2);
  auto logits = random_floats(rng, 2049, -5.0f, 5.0f);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  EXPECT_EQ(sample(be, logits.data(), 2049, {0.0f, 50, 1.0f}, 1, 2, 3), argmax);
  for (uint64_t seed = 0; seed < 5; ++seed)
    EXPECT_EQ(sample(be, logits.data(), 2049, {1.0f, 1, 1.0f}, seed, 0, 0), argmax);
  // Ties under temperature 0 go to the lower id.
  std::vector<float> tie = {0.0f, 3.0f, 3.0f};
  EXPECT_EQ(sample(be, tie.data(), 3, {0.0f, 0, 1.0f}, 0, 0, 0), 1);
  // The same keys give the same draw; it equals util's sampler with counter_uniform.
  const SamplingParams p{0.9f, 50, 0.95f};
  for (uint64_t frame = 0; frame < 20; ++frame) {
    const int32_t a = sample(be, logits.data(), 2049, p, 42, frame, 1);
    EXPECT_EQ(a, sample(be, logits.data(), 2049, p, 42, frame, 1));
    EXPECT_EQ(
        a, sample_logits(logits, p.temperature, p.top_k, p.top_p, counter_uniform(42, frame, 1)));
  }
}

}  // namespace
}  // namespace drama::test

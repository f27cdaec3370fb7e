// Pruning contract (spec section 5), exact: a pruned checkpoint gives the same logits and codes as
// the unpruned checkpoint with the router logits of the removed experts set to -inf (through the
// model's test-only hook). Both router layouts; configs/tiny.json, seed 1, NVFP4 experts.
#include <gtest/gtest.h>

#include <set>

#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"

#include "model/model_testing.h"

namespace drama {
namespace {

using namespace drama::testing;

std::vector<std::vector<int32_t>> removed_experts(const Drama3Config& pruned) {
  std::vector<std::vector<int32_t>> removed(pruned.backbone.num_layers);
  for (int64_t l = 0; l < pruned.backbone.num_layers; ++l) {
    if (pruned.is_dense_layer(l)) continue;
    const auto kept = pruned.stored_experts(l);
    const std::set<int64_t> k(kept.begin(), kept.end());
    for (int64_t e = 0; e < pruned.moe.num_experts; ++e)
      if (!k.count(e)) removed[l].push_back(static_cast<int32_t>(e));
  }
  return removed;
}

class Pruning : public ::testing::TestWithParam<const char*> {};

TEST_P(Pruning, PrunedEqualsUnprunedWithRemovedExpertsAtMinusInfinity) {
  const std::string layout = GetParam();
  Checkpoint full(make_checkpoint("tiny-nvfp4", "--nvfp4"));
  Checkpoint pruned(make_checkpoint("tiny-nvfp4-pruned-" + layout,
                                    "--nvfp4 --prune-to 5 --router-layout " + layout));
  auto be = make_backend({"cpu", 1});
  Drama3Model a(full, *be), b(pruned, *be);
  const auto removed = removed_experts(pruned.config());
  ASSERT_FALSE(removed[1].empty());
  a.set_masked_experts_for_test(removed);

  const Drama3Config& c = full.config();
  const Voice voice = random_voice(c, 5, 31, "reference words");
  const Voice codes = random_voice(c, 6, 37, "");
  const Prompt cond = conditional_prompt(c, "pruning contract", voice);
  const Prompt uncond = unconditional_prompt(c, "pruning contract");
  const auto la = a.teacher_forced(cond, codes.codes, codes.frames);
  const auto lb = b.teacher_forced(cond, codes.codes, codes.frames);
  EXPECT_EQ(la.codebook0, lb.codebook0);  // bit for bit
  EXPECT_EQ(la.tower, lb.tower);

  for (uint64_t seed : {1u, 2u, 3u}) {
    GenerationOptions o;
    o.seed = seed;
    o.gamma = 1.5f;
    o.max_frames = 8;
    const auto ga = a.generate(cond, &uncond, o, {});
    const auto gb = b.generate(cond, &uncond, o, {});
    EXPECT_EQ(ga.codes, gb.codes) << "seed " << seed;
  }

  // Control: without the mask the unpruned model differs (the contract is not vacuous).
  a.set_masked_experts_for_test({});
  EXPECT_NE(a.teacher_forced(cond, codes.codes, codes.frames).codebook0, lb.codebook0);
}

INSTANTIATE_TEST_SUITE_P(RouterLayouts, Pruning, ::testing::Values("full", "sliced"));

}  // namespace
}  // namespace drama

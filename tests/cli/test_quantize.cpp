// labels: parity
// `drama quantize` (spec sections 4-5) through the real binary: the NVFP4 codes and scales equal
// the PyTorch reference quantizer's (tools/reference/nvfp4.py) bit for bit, everything else is
// copied unchanged, a pruned output obeys the pruning contract exactly, and bad input is refused
// with nothing written. BF16 inputs come from `drama make-checkpoint` (configs/tiny.json, seed 1,
// and a variant with a shared expert).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

#include "format/checkpoint.h"
#include "format/manifest.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "util/fs.h"

#include "model/model_testing.h"

namespace drama {
namespace {

namespace fs = std::filesystem;
using namespace drama::testing;

std::string drama() {
  return quote(drama_bin());
}

// configs/tiny.json with a shared expert, so the shared expert's projections are covered too.
fs::path shared_expert_config() {
  const fs::path path = test_dir() / "tiny-shared.json";
  if (!fs::exists(path)) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(source_dir() + "/configs/tiny.json"));
    j["backbone"]["moe"]["shared_expert_intermediate_size"] = 48;
    std::ofstream(path) << j.dump(2);
  }
  return path;
}

fs::path bf16_checkpoint(const std::string& name, const std::string& config) {
  const fs::path dir = test_dir() / name;
  if (!fs::exists(dir))
    must_run(drama() + " make-checkpoint --config " + quote(config) + " --seed 1 -o " +
             quote(dir.string()));
  return dir;
}

fs::path write_keep_file(const std::string& name, const std::string& text) {
  const fs::path path = test_dir() / name;
  std::ofstream(path) << text;
  return path;
}

// Every tensor of the reference's file equals drama's output (dtype, shape, bytes); the NVFP4
// tensors of the output are exactly the reference's; every other output tensor is the input's.
void expect_matches_reference(const fs::path& in, const fs::path& out, const fs::path& reference,
                              bool pruned) {
  const TensorSet input(in), output(out);
  const TensorSet ref = TensorSet::single(reference);
  size_t compared = 0;
  for (const std::string& name : ref.names()) {
    const TensorView r = ref.view(name);
    const TensorInfo* o = output.find(name);
    ASSERT_NE(o, nullptr) << name << " missing from drama's output";
    EXPECT_EQ(o->dtype, r.info->dtype) << name;
    EXPECT_EQ(o->shape, r.info->shape) << name;
    const TensorView ov = output.view(name);
    ASSERT_EQ(ov.bytes(), r.bytes()) << name;
    EXPECT_EQ(std::memcmp(ov.data, r.data, r.bytes()), 0) << name << " differs from the reference";
    ++compared;
  }
  EXPECT_GT(compared, 30u);
  for (const std::string& name : output.names()) {
    if (ref.find(name)) continue;
    const TensorInfo* i = input.find(name);
    ASSERT_NE(i, nullptr) << name << " is in the output but neither input nor reference";
    if (pruned && name.find(".router.") != std::string::npos) continue;  // may be sliced
    const TensorView a = input.view(name), b = output.view(name);
    ASSERT_EQ(a.bytes(), b.bytes()) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0) << name << " was not copied unchanged";
  }
}

TEST(Quantize, CodesAndScalesEqualTheReferenceBitForBit) {
  for (const std::string& config :
       {source_dir() + "/configs/tiny.json", shared_expert_config().string()}) {
    SCOPED_TRACE(config);
    const std::string tag = fs::path(config).stem().string();
    const fs::path in = bf16_checkpoint("bf16-" + tag, config);
    const fs::path out = test_dir() / ("nvfp4-" + tag);
    const fs::path ref = test_dir() / ("reference-" + tag + ".safetensors");
    must_run(drama() + " quantize " + quote(in.string()) + " " + quote(out.string()));
    must_run(reference_cli() + " quantize --checkpoint " + quote(in.string()) + " -o " +
             quote(ref.string()));
    expect_matches_reference(in, out, ref, false);

    // Gate and up of one expert share one tensor scale (ModelOpt's fused gate_up), down has its
    // own; the result loads, and its manifest verifies.
    const TensorSet t(out);
    const std::string e = "backbone.layers.1.mlp.experts.3.";
    EXPECT_EQ(t.view(e + "gate_proj.weight_scale_2").as<float>()[0],
              t.view(e + "up_proj.weight_scale_2").as<float>()[0]);
    Checkpoint loaded(out);
    ASSERT_TRUE(loaded.quant().has_value());
    must_run(drama() + " verify " + quote(out.string()) + " --manifest " +
             quote((out / "manifest.json").string()));
  }
}

TEST(Quantize, SameInputSameBytes) {
  const fs::path in = bf16_checkpoint("bf16-tiny", source_dir() + "/configs/tiny.json");
  const fs::path a = test_dir() / "again-a", b = test_dir() / "again-b";
  must_run(drama() + " quantize " + quote(in.string()) + " " + quote(a.string()) + " --name x");
  must_run(drama() + " quantize " + quote(in.string()) + " " + quote(b.string()) + " --name x");
  EXPECT_EQ(read_text_file(a / "manifest.json"), read_text_file(b / "manifest.json"));
}

class QuantizePruned : public ::testing::TestWithParam<const char*> {};

// The pruned output equals the unpruned quantized output with the removed experts' router logits
// at -inf (spec section 5), bit for bit; and its experts equal the reference's.
TEST_P(QuantizePruned, ObeysThePruningContract) {
  const std::string layout = GetParam();
  const fs::path in = bf16_checkpoint("bf16-tiny", source_dir() + "/configs/tiny.json");
  const fs::path full = test_dir() / "nvfp4-unpruned";
  if (!fs::exists(full))
    must_run(drama() + " quantize " + quote(in.string()) + " " + quote(full.string()));
  const fs::path keep = write_keep_file("keep.json", "[null, [0, 2, 5, 7]]");
  const fs::path out = test_dir() / ("nvfp4-pruned-" + layout);
  must_run(drama() + " quantize " + quote(in.string()) + " " + quote(out.string()) +
           " --keep-experts " + quote(keep.string()) + " --router-layout " + layout);
  const fs::path ref = test_dir() / ("reference-pruned-" + layout + ".safetensors");
  must_run(reference_cli() + " quantize --checkpoint " + quote(in.string()) + " --keep-experts " +
           quote(keep.string()) + " -o " + quote(ref.string()));
  expect_matches_reference(in, out, ref, true);

  Checkpoint a(full), b(out);
  ASSERT_TRUE(b.config().moe.kept_experts.has_value());
  EXPECT_EQ(b.config().stored_experts(1), (std::vector<int64_t>{0, 2, 5, 7}));
  EXPECT_EQ(b.weights().backbone[1].moe.router.out, layout == "sliced" ? 4 : 8);
  EXPECT_EQ(TensorSet(out).find("backbone.layers.1.mlp.experts.1.gate_proj.weight"), nullptr);

  auto be = make_backend({"cpu", 1});
  Drama3Model ma(a, *be), mb(b, *be);
  ma.set_masked_experts_for_test({{}, {1, 3, 4, 6}});
  const Drama3Config& c = a.config();
  const Voice voice = random_voice(c, 5, 31, "reference words");
  const Voice codes = random_voice(c, 6, 37, "");
  const Prompt cond = conditional_prompt(c, "pruning contract", voice);
  const auto la = ma.teacher_forced(cond, codes.codes, codes.frames);
  const auto lb = mb.teacher_forced(cond, codes.codes, codes.frames);
  EXPECT_EQ(la.codebook0, lb.codebook0);
  EXPECT_EQ(la.tower, lb.tower);
  ma.set_masked_experts_for_test({});  // control: the mask matters
  EXPECT_NE(ma.teacher_forced(cond, codes.codes, codes.frames).codebook0, lb.codebook0);
}

INSTANTIATE_TEST_SUITE_P(RouterLayouts, QuantizePruned, ::testing::Values("full", "sliced"));

TEST(Quantize, RefusesBadInputAndWritesNothing) {
  const fs::path in = bf16_checkpoint("bf16-tiny", source_dir() + "/configs/tiny.json");
  const fs::path out = test_dir() / "refused";
  const std::string base = drama() + " quantize " + quote(in.string()) + " " + quote(out.string());
  struct Case {
    std::string keep;
    int status;
    std::string message;
  };
  for (const Case& k : std::vector<Case>{{"[null, [0, 9]]", 2, "expert 9 is not stored"},
                                         {"[[1], [0, 1]]", 2, "layer 0 is a dense layer"},
                                         {"[null, []]", 2, "non-empty list"},
                                         {"[null, [1, 1]]", 2, "listed twice"},
                                         {"[null]", 2, "one per backbone layer"},
                                         {"[null, [1", 2, "invalid JSON"}}) {
    const fs::path keep = write_keep_file("bad-keep.json", k.keep);
    const CommandResult r = run_command(base + " --keep-experts " + quote(keep.string()));
    EXPECT_EQ(r.status, k.status) << k.keep << "\n" << r.output;
    EXPECT_NE(r.output.find(k.message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << k.keep;
  }
  // An NVFP4 input is refused; an existing OUT_DIR is never overwritten.
  const fs::path quantized = test_dir() / "nvfp4-tiny";
  if (!fs::exists(quantized))
    must_run(base.substr(0, base.size() - quote(out.string()).size()) + quote(quantized.string()));
  CommandResult r =
      run_command(drama() + " quantize " + quote(quantized.string()) + " " + quote(out.string()));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("already quantized"), std::string::npos) << r.output;
  const std::string before = read_text_file(quantized / "manifest.json");
  r = run_command(base.substr(0, base.size() - quote(out.string()).size()) +
                  quote(quantized.string()));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(read_text_file(quantized / "manifest.json"), before);
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(test_dir()))
    EXPECT_EQ(entry.path().filename().string().find(".partial-"), std::string::npos)
        << entry.path();
}

}  // namespace
}  // namespace drama

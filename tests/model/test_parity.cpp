// labels: parity
// Engine vs the PyTorch reference (tools/reference/cli.py) on configs/tiny.json checkpoints made at
// test time: teacher-forced logits (`drama logits`) within a relative L2 tolerance, and greedy
// generation (`drama say --format codes`) with identical codes. Covers BF16 and NVFP4 experts,
// pruned and unpruned, full and sliced router layouts.
//
// Tolerance: both sides compute in float32 from the same dequantized weights; they differ only in
// summation order (blocked/vectorised dot products vs torch's BLAS) and in exp/rsqrt rounding.
// Each dot product of length n <= 128 carries a relative error ~ sqrt(n) * 2^-24 ~ 7e-7; through
// about a dozen dependent operations (2 backbone layers, 2 tower layers, heads) the errors add
// up to a few 1e-6 in the logits. 1e-5 leaves a margin of several times that, and stays 2 orders
// of magnitude below what one BF16 rounding of the activations would cause (~2e-3).
#include <gtest/gtest.h>

#include "format/voice.h"
#include "util/fs.h"

#include "model/model_testing.h"

namespace drama {
namespace {

using namespace drama::testing;

constexpr double kTolerance = 1e-5;
constexpr const char* kText = "Hello, drama!";

std::string drama() {
  const auto dir = test_dir();
  return "DRAMA_LOCK_DIR=" + quote((dir / "locks").string()) +
         " DRAMA_CACHE=" + quote((dir / "cache").string()) + " " + quote(drama_bin());
}

std::string checkpoint_args(const std::filesystem::path& ckpt) {
  return " --checkpoint " + quote(ckpt.string()) + " --manifest " +
         quote((ckpt / "manifest.json").string()) + " --backend cpu --threads 1";
}

struct Inputs {
  std::filesystem::path codes, voice;
};

Inputs write_inputs(const std::filesystem::path& ckpt, const std::string& name) {
  const Drama3Config c = load_drama3_config(ckpt / "config.json");
  Inputs in{test_dir() / (name + ".codes"), test_dir() / (name + ".voice")};
  const std::string codec = sha256_file(ckpt / "codec" / "model.safetensors");
  Voice codes = random_voice(c, 6, 17, "");
  codes.codec_sha256 = codec;
  write_codes(in.codes, codes);
  Voice voice = random_voice(c, 5, 23, "The reference transcript.");
  voice.codec_sha256 = codec;
  write_voice(in.voice, voice);
  return in;
}

class Parity : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(Parity, TeacherForcedLogitsMatchTheReference) {
  const auto [name, flags] = GetParam();
  const auto ckpt = make_checkpoint(name, flags);
  const Inputs in = write_inputs(ckpt, name);
  const auto mine = test_dir() / (std::string(name) + ".engine.logits");
  const auto ref = test_dir() / (std::string(name) + ".ref.logits");
  must_run(drama() + " logits --text " + quote(kText) + " --voice " + quote(in.voice.string()) +
           " --codes " + quote(in.codes.string()) + " -o " + quote(mine.string()) +
           checkpoint_args(ckpt));
  must_run(reference_cli() + " logits --checkpoint " + quote(ckpt.string()) + " --text " +
           quote(kText) + " --voice " + quote(in.voice.string()) + " --codes " +
           quote(in.codes.string()) + " -o " + quote(ref.string()));
  const auto a = read_f32_tensors(mine), b = read_f32_tensors(ref);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (const auto& [tensor, values] : b) {
    ASSERT_TRUE(a.count(tensor)) << tensor;
    ASSERT_EQ(a.at(tensor).size(), values.size()) << tensor;
    const double err = relative_l2(a.at(tensor), values);
    std::printf("%s %s: relative L2 error %.3g (tolerance %.0e)\n", name, tensor.c_str(), err,
                kTolerance);
    EXPECT_LE(err, kTolerance) << name << " " << tensor;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, Parity, ::testing::ValuesIn(testing::kParityCheckpoints),
                         testing::checkpoint_case_name);

class GreedyParity : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(GreedyParity, GreedyCodesEqualTheReference) {
  const auto [name, flags] = GetParam();
  const auto ckpt = make_checkpoint(name, flags);
  const Inputs in = write_inputs(ckpt, name);
  const auto mine = test_dir() / (std::string(name) + ".engine.codes");
  const auto ref = test_dir() / (std::string(name) + ".ref.codes");
  const auto mapped = test_dir() / (std::string(name) + ".engine-mapped.codes");
  for (const auto& [out, extra] : {std::pair{mine, ""}, std::pair{mapped, " --mmap"}})
    must_run(drama() + " say " + quote(kText) + " --voice " + quote(in.voice.string()) +
             " --format codes -o " + quote(out.string()) +
             " --seed 1 --temperature 0 --gamma 1.5 --max-frames 8" + extra +
             checkpoint_args(ckpt));
  must_run(reference_cli() + " generate --checkpoint " + quote(ckpt.string()) + " --text " +
           quote(kText) + " --voice " + quote(in.voice.string()) +
           " --seed 1 --temperature 0 --top-k 50 --top-p 1 --gamma 1.5 --max-frames 8 -o " +
           quote(ref.string()));
  // Read the int32 tensor directly: the reference writes no codec_sha256, which read_codes wants.
  auto codes_of = [](const std::filesystem::path& p) {
    SafetensorsFile f(p);
    Voice v;
    const auto view = f.view("codes");
    v.codes.assign(view.as<int32_t>().begin(), view.as<int32_t>().end());
    v.frames = view.info->shape.at(0);
    return v;
  };
  const Voice a = codes_of(mine), b = codes_of(ref);
  std::printf("%s: %lld frames (engine), %lld (reference)\n", name,
              static_cast<long long>(a.frames), static_cast<long long>(b.frames));
  ASSERT_GT(a.frames, 0);
  EXPECT_EQ(a.frames, b.frames);
  EXPECT_EQ(a.codes, b.codes);
  // Weights read into memory (the default) and mapped (--mmap) give the same codes.
  EXPECT_EQ(codes_of(mapped).codes, a.codes);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, GreedyParity,
                         ::testing::Values(testing::kParityCheckpoints.front(),
                                           testing::kParityCheckpoints.back()),
                         testing::checkpoint_case_name);

}  // namespace
}  // namespace drama

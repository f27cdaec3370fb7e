// labels: parity
// The C++ Mimi codec against tools/reference/mimi.py (PyTorch, HF MimiModel semantics) on a tiny
// random codec: decoded PCM within a stated tolerance, encoder codes equal away from near ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "backend/backend.h"
#include "codec/mimi.h"
#include "codec_testing.h"
#include "format/safetensors.h"
#include "util/fs.h"

namespace drama {
namespace {

namespace fs = std::filesystem;

void run_reference(const std::string& args) {
  const char* py = std::getenv("DRAMA_PYTHON");
  const char* src = std::getenv("DRAMA_SOURCE_DIR");
  ASSERT_TRUE(py && src) << "DRAMA_PYTHON and DRAMA_SOURCE_DIR must be set (CTest sets them)";
  const std::string cmd =
      std::string(py) + " " + src + "/tools/reference/mimi.py " + args + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

template <typename T>
std::vector<T> read_tensor(const fs::path& file, const std::string& name) {
  const SafetensorsFile f(file);
  const auto v = f.view(name).as<T>();
  return {v.begin(), v.end()};
}

class MimiParity : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_tiny_codec(scratch_.path() / "codec", 21);
    backend_ = make_backend({"cpu", 1});
    model_ = std::make_unique<MimiModel>(scratch_.path() / "codec", *backend_);
  }
  testing::ScratchDir scratch_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<MimiModel> model_;
};

// Tolerance: both sides compute in float32 with different reduction orders (PyTorch's conv and
// matmul kernels vs the backend's fixed-order loops) through ~30 layers; differences of a few
// float32 ulps per layer grow to ~5e-7 here (measured). 1e-5 x max(1, peak) leaves a 20x
// margin while a wrong padding, trim or layer order gives errors of the signal's own size.
TEST_F(MimiParity, DecodeMatchesReference) {
  for (int64_t k : {8, 3}) {
    const int64_t frames = 7;
    const auto codes = testing::random_codes(frames, k, model_->codebook_size(), 31 + k);
    SafetensorsWriter w;
    w.add_typed<int32_t>("codes", DType::I32, {frames, k}, codes);
    w.write(scratch_.path() / "codes.safetensors");
    run_reference("decode --codec " + (scratch_.path() / "codec").string() + " --codes " +
                  (scratch_.path() / "codes.safetensors").string() + " -o " +
                  (scratch_.path() / "ref.safetensors").string());
    const auto ref = read_tensor<float>(scratch_.path() / "ref.safetensors", "pcm");
    const auto got = model_->decode(codes, frames, k);
    ASSERT_EQ(got.size(), ref.size());
    double peak = 0, max_err = 0, err2 = 0, ref2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      peak = std::max(peak, std::fabs(static_cast<double>(ref[i])));
      max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - ref[i]));
      err2 += (got[i] - ref[i]) * static_cast<double>(got[i] - ref[i]);
      ref2 += ref[i] * static_cast<double>(ref[i]);
    }
    std::printf("K=%lld: peak %.4g, max |err| %.3g, NMSE %.3g\n", static_cast<long long>(k), peak,
                max_err, err2 / ref2);
    EXPECT_GT(peak, 1e-3);
    EXPECT_LE(max_err, 1e-5 * std::max(1.0, peak));
  }
}

// Near ties: the reference reports, per code, the gap between the second-best and the best
// squared distance (float64). Where the gap is below 1e-3 x (1 + best) the two sides may
// legitimately pick different entries, and every later codebook of that frame then sees another
// residual; so a frame is compared codebook by codebook up to its first near tie. At least 90%
// of all codes must be compared, and every compared code must be equal.
TEST_F(MimiParity, EncodeMatchesReferenceAwayFromTies) {
  const int64_t k = 8;
  const auto pcm = testing::test_signal(3 * 24000 + 777, 24000, 8);
  SafetensorsWriter w;
  w.add_typed<float>("pcm", DType::F32, {static_cast<int64_t>(pcm.size())}, pcm);
  w.write(scratch_.path() / "pcm.safetensors");
  run_reference("encode --codec " + (scratch_.path() / "codec").string() + " --audio-f32 " +
                (scratch_.path() / "pcm.safetensors").string() + " --num-codebooks 8 -o " +
                (scratch_.path() / "ref_codes.safetensors").string());
  const auto ref = read_tensor<int32_t>(scratch_.path() / "ref_codes.safetensors", "codes");
  const auto margin = read_tensor<float>(scratch_.path() / "ref_codes.safetensors", "margin");
  const auto got = model_->encode(pcm, k);
  ASSERT_EQ(got.size(), ref.size());
  const int64_t frames = static_cast<int64_t>(got.size()) / k;
  int64_t compared = 0, equal = 0;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < k; ++j) {
      if (margin[f * k + j] < 1e-3f) break;  // near tie: stop comparing this frame
      ++compared;
      equal += got[f * k + j] == ref[f * k + j];
      if (got[f * k + j] != ref[f * k + j]) break;
    }
  std::printf("encode: %lld frames, %lld codes compared, %lld equal\n",
              static_cast<long long>(frames), static_cast<long long>(compared),
              static_cast<long long>(equal));
  EXPECT_EQ(equal, compared);
  EXPECT_GE(compared, static_cast<int64_t>(0.9 * frames * k));
}

}  // namespace
}  // namespace drama

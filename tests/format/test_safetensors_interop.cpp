// labels: parity
// Interoperability with the Python reference tools (tools/reference/safetensors_io.py): a file
// written here is loaded there and written back with one extra tensor, then read here again;
// every tensor must come back bit for bit. Skipped when DRAMA_PYTHON or DRAMA_SOURCE_DIR is unset.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "format/safetensors.h"
#include "format/safetensors_testing.h"

namespace drama {
namespace {

constexpr uint32_t kSeed = 7;

TEST(SafetensorsInterop, RoundTripThroughPythonReference) {
  const char* python = std::getenv("DRAMA_PYTHON");
  const char* source = std::getenv("DRAMA_SOURCE_DIR");
  if (!python || !source) GTEST_SKIP() << "DRAMA_PYTHON / DRAMA_SOURCE_DIR not set";
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  testing::ScratchDir dir;

  SafetensorsWriter w;
  std::map<std::string, std::vector<uint8_t>> sent;
  const DType types[] = {DType::BOOL, DType::U8,  DType::I8,      DType::I16,
                         DType::I32,  DType::I64, DType::F16,     DType::BF16,
                         DType::F32,  DType::F64, DType::F8_E4M3, DType::F8_E5M2};
  for (DType t : types) {
    const std::string name = "t." + std::string(dtype_name(t));
    std::vector<uint8_t> b(2 * 3 * dtype_size(t));
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    if (t == DType::BOOL)
      for (auto& x : b) x &= 1;
    // Keep floats finite: NaN payloads need not survive numpy conversions.
    if (t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64)
      for (size_t i = dtype_size(t) - 1; i < b.size(); i += dtype_size(t)) b[i] &= 0x3f;
    w.add(name, t, {2, 3}, b);
    sent[name] = b;
  }
  w.set_metadata("origin", "c++");
  w.write(dir / "cpp.safetensors");

  const auto script = dir / "roundtrip.py";
  testing::write_text(script, R"(import sys, torch
sys.path.insert(0, sys.argv[1] + "/tools/reference")
import safetensors_io as st
tensors, meta = st.load(sys.argv[2])
kinds = st.read_dtypes(sys.argv[2])
out = {n: ((kinds[n], t) if kinds[n].startswith("F8_") else t) for n, t in tensors.items()}
out["py.arange"] = torch.arange(10, dtype=torch.float32)
meta["python"] = "yes"
st.save(sys.argv[3], out, meta)
)");
  const std::string cmd = std::string(python) + " " + script.string() + " " + source + " " +
                          (dir / "cpp.safetensors").string() + " " +
                          (dir / "py.safetensors").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  SafetensorsFile back(dir / "py.safetensors");
  EXPECT_EQ(back.metadata().at("origin"), "c++");
  EXPECT_EQ(back.metadata().at("python"), "yes");
  for (const auto& [name, bytes] : sent) {
    const TensorInfo* info = back.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(std::string(dtype_name(info->dtype)), name.substr(2));
    EXPECT_EQ(info->shape, (std::vector<int64_t>{2, 3}));
    TensorView v = back.view(name);
    ASSERT_EQ(v.bytes(), bytes.size()) << name;
    EXPECT_EQ(std::memcmp(v.data, bytes.data(), bytes.size()), 0) << name;
  }
  std::vector<uint8_t> raw(back.view("py.arange").bytes());
  std::memcpy(raw.data(), back.view("py.arange").data, raw.size());
  float tenth;
  std::memcpy(&tenth, raw.data() + 9 * 4, 4);
  EXPECT_EQ(tenth, 9.0f);
}

}  // namespace
}  // namespace drama

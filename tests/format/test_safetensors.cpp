// Safetensors writer -> reader round trips: every dtype, metadata, header layout, atomic writes,
// sharded and single-file sets, zero-copy views.
#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "format/safetensors_testing.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {
namespace {

using testing::ScratchDir;

constexpr uint32_t kSeed = 20261129;

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

const DType kAllTypes[] = {DType::BOOL, DType::U8,  DType::I8,      DType::I16,
                           DType::I32,  DType::I64, DType::F16,     DType::BF16,
                           DType::F32,  DType::F64, DType::F8_E4M3, DType::F8_E5M2};

TEST(Safetensors, RoundTripsEveryDtype) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  ScratchDir dir;
  SafetensorsWriter w;
  std::map<std::string, std::vector<uint8_t>> expected;
  for (DType t : kAllTypes) {
    const std::string name = "t." + std::string(dtype_name(t));
    auto bytes = random_bytes(3 * 5 * dtype_size(t), rng);
    w.add(name, t, {3, 5}, bytes);
    expected[name] = bytes;
  }
  w.add("scalar", DType::F32, {}, random_bytes(4, rng));
  w.add("empty", DType::F32, {0, 7}, {});
  w.write(dir / "model.safetensors");

  SafetensorsFile f(dir / "model.safetensors");
  EXPECT_EQ(f.tensors().size(), std::size(kAllTypes) + 2);
  EXPECT_TRUE(f.metadata().empty());
  for (DType t : kAllTypes) {
    const std::string name = "t." + std::string(dtype_name(t));
    const TensorInfo* info = f.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, t);
    EXPECT_EQ(info->shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(info->numel(), 15);
    TensorView v = f.view(name);
    ASSERT_EQ(v.bytes(), expected[name].size());
    EXPECT_EQ(std::memcmp(v.data, expected[name].data(), v.bytes()), 0) << name;
  }
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_TRUE(f.find("scalar")->shape.empty());
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.view("empty").bytes(), 0u);
}

TEST(Safetensors, TensorsAreStoredInAddOrderAndHeaderIsPadded) {
  SafetensorsWriter w;
  const float a[3] = {1, 2, 3};
  const int32_t b[1] = {7};
  w.add_typed<float>("zeta", DType::F32, {3}, a);
  w.add_typed<int32_t>("alpha", DType::I32, {1}, b);
  auto bytes = w.serialize();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 16);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
  EXPECT_EQ(header.find_first_not_of(' ', header.find_last_of('}') + 1), std::string::npos);
  auto h = parse_safetensors_header(bytes, bytes.size(), "mem");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "zeta");  // data order, not alphabetical
  EXPECT_EQ(h.tensors[0].begin, 0u);
  EXPECT_EQ(h.tensors[1].name, "alpha");
  EXPECT_EQ(h.tensors[1].begin, 12u);
  EXPECT_EQ(h.data_start, 8 + n);
}

TEST(Safetensors, MetadataRoundTrips) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("codec_sha256", std::string(64, 'a'));
  w.set_metadata("unicode", "caf\xc3\xa9");
  const int32_t codes[6] = {1, 2, 3, 4, 5, 6};
  w.add_typed<int32_t>("codes", DType::I32, {3, 2}, codes);
  w.write(dir / "voice.safetensors");
  SafetensorsFile f(dir / "voice.safetensors");
  EXPECT_EQ(f.metadata().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("unicode"), "caf\xc3\xa9");
  auto v = f.view("codes").as<int32_t>();
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[5], 6);
}

TEST(Safetensors, WriteEqualsSerializeAndLeavesNoTemporaryFiles) {
  ScratchDir dir;
  SafetensorsWriter w;
  std::mt19937 rng(kSeed);
  w.add("a", DType::BF16, {4, 4}, random_bytes(32, rng));
  w.set_metadata("k", "v");
  w.write(dir / "x.safetensors");
  w.write(dir / "x.safetensors");  // overwrite in place
  EXPECT_EQ(read_file(dir / "x.safetensors"), w.serialize());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
}

TEST(Safetensors, WriteIntoMissingDirectoryFailsCleanly) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.add("a", DType::U8, {1}, std::vector<uint8_t>{1});
  EXPECT_THROW(w.write(dir / "no-such-dir" / "x.safetensors"), Error);
}

TEST(Safetensors, BorrowedTensorsAreWrittenWithoutCopy) {
  ScratchDir dir;
  std::vector<uint8_t> big(1 << 16, 0x5a), small(8, 0x11);
  SafetensorsWriter w;
  w.add_borrowed("big", DType::U8, {1 << 16}, big);
  w.add("small", DType::I64, {1}, small);
  EXPECT_EQ(w.data_bytes(), (1u << 16) + 8u);
  w.write(dir / "b.safetensors");
  SafetensorsFile f(dir / "b.safetensors");
  EXPECT_EQ(f.view("big").as<uint8_t>()[100], 0x5a);
  EXPECT_EQ(f.view("small").as<int64_t>()[0], 0x1111111111111111);
}

TEST(Safetensors, WriterRefusesBadTensors) {
  SafetensorsWriter w;
  std::vector<uint8_t> four(4);
  w.add("a", DType::F32, {1}, four);
  EXPECT_THROW(w.add("a", DType::F32, {1}, four), Error);                     // twice
  EXPECT_THROW(w.add("", DType::F32, {1}, four), Error);                      // empty
  EXPECT_THROW(w.add("__metadata__", DType::F32, {1}, four), Error);          // reserved
  EXPECT_THROW(w.add("b", DType::F32, {-1}, four), Error);                    // negative
  EXPECT_THROW(w.add("c", DType::F32, {2}, four), Error);                     // size mismatch
  EXPECT_THROW(w.add("d", DType::F32, {1ll << 40, 1ll << 40}, four), Error);  // overflow
  EXPECT_EQ(w.data_bytes(), 4u);
  try {
    w.add("c", DType::F32, {2}, four);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'c'"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, MisalignedTypedViewIsRefused) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.add("odd", DType::U8, {3}, std::vector<uint8_t>{1, 2, 3});
  w.add("f", DType::F32, {1}, std::vector<uint8_t>(4));
  w.write(dir / "m.safetensors");
  SafetensorsFile f(dir / "m.safetensors");
  EXPECT_EQ(f.view("f").as<uint8_t>().size(), 4u);
  try {
    (void)f.view("f").as<float>();
    FAIL() << "misaligned view accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'f'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)f.view("odd").as<uint16_t>(), Error);  // 3 bytes are not whole elements
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.add("a", DType::U8, {1}, std::vector<uint8_t>{1});
  w.write(dir / "model.safetensors");
  SafetensorsFile f(dir / "model.safetensors");
  EXPECT_EQ(f.find("b"), nullptr);
  try {
    (void)f.view("b");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos);
  }
}

TEST(Safetensors, EmptyFileWithNoTensorsIsValid) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.write(dir / "model.safetensors");
  TensorSet s(dir.path());
  EXPECT_TRUE(s.names().empty());
  EXPECT_EQ(s.total_bytes(), 0u);
}

// Both residencies (mapped files, --mmap, and the default in-memory copies) give the same tensors.
class ShardedSet : public ::testing::TestWithParam<Residency> {};

TEST_P(ShardedSet, RoundTrips) {
  ScratchDir dir;
  std::mt19937 rng(kSeed);
  nlohmann::json map = nlohmann::json::object();
  std::map<std::string, std::vector<uint8_t>> expected;
  uint64_t total = 0;
  for (int shard = 1; shard <= 3; ++shard) {
    SafetensorsWriter w;
    const std::string file = "model-0000" + std::to_string(shard) + "-of-00003.safetensors";
    for (int i = 0; i < 4; ++i) {
      const std::string name = "layers." + std::to_string(shard * 10 + i) + ".weight";
      auto bytes = random_bytes(2 * 8, rng);
      w.add(name, DType::BF16, {2, 4}, bytes);
      expected[name] = bytes;
      map[name] = file;
      total += bytes.size();
    }
    w.write(dir / file);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  write_text_file_atomic(dir / "model.safetensors.index.json", index.dump(2));

  TensorSet set(dir.path(), GetParam());
  EXPECT_EQ(set.root(), dir.path());
  EXPECT_EQ(set.total_bytes(), total);
  auto names = set.names();
  ASSERT_EQ(names.size(), 12u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const auto& [name, bytes] : expected) {
    TensorView v = set.view(name);
    ASSERT_EQ(v.bytes(), bytes.size());
    EXPECT_EQ(std::memcmp(v.data, bytes.data(), bytes.size()), 0) << name;
    EXPECT_NE(std::string(v.file).find("-of-00003"), std::string::npos);
    EXPECT_EQ(set.find(name)->dtype, DType::BF16);
  }
  EXPECT_EQ(set.find("nope"), nullptr);
  EXPECT_THROW((void)set.view("nope"), Error);

  TensorSet moved = std::move(set);  // views stay valid through moves (checkpoints hold sets)
  EXPECT_EQ(moved.view("layers.10.weight").bytes(), 16u);
}

INSTANTIATE_TEST_SUITE_P(Residencies, ShardedSet,
                         ::testing::Values(Residency::Mapped, Residency::InMemory));

TEST(Safetensors, InMemoryIsACopyAndRefusesLikeAMapping) {
  ScratchDir dir;
  std::mt19937 rng(kSeed);
  SafetensorsWriter w;
  auto bytes = random_bytes(64, rng);
  w.add("a", DType::U8, {64}, bytes);
  w.write(dir / "model.safetensors");
  TensorSet copy(dir.path(), Residency::InMemory);
  // Rewrite the same file (same inode) in place: the copy keeps the bytes it read at open.
  SafetensorsWriter w2;
  auto other = random_bytes(64, rng);
  w2.add("a", DType::U8, {64}, other);
  testing::write_bytes(dir / "model.safetensors", w2.serialize());
  EXPECT_EQ(std::memcmp(copy.view("a").data, bytes.data(), bytes.size()), 0);

  // A hostile file gets the same error either way.
  testing::write_bytes(dir / "model.safetensors", testing::craft(R"({"a": {"dtype": "U8"}})"));
  std::string mapped_error, memory_error;
  try {
    TensorSet s(dir.path());
  } catch (const Error& e) {
    mapped_error = e.what();
  }
  try {
    TensorSet s(dir.path(), Residency::InMemory);
  } catch (const Error& e) {
    memory_error = e.what();
  }
  EXPECT_FALSE(mapped_error.empty());
  EXPECT_EQ(memory_error, mapped_error);
}

TEST(Safetensors, SingleFileSetAndDirectoryWithOneFile) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.add("x", DType::F16, {2}, std::vector<uint8_t>{0, 0x3c, 0, 0x40});
  w.write(dir / "model.safetensors");
  w.write(dir / "voice.safetensors");
  TensorSet a(dir.path());
  TensorSet b = TensorSet::single(dir / "voice.safetensors");
  EXPECT_EQ(a.names(), b.names());
  EXPECT_EQ(f16_to_f32(b.view("x").as<uint16_t>()[1]), 2.0f);
  EXPECT_EQ(b.root(), dir / "voice.safetensors");
}

}  // namespace
}  // namespace drama

namespace drama {
namespace {

// Reading a checkpoint into memory is refused up front, with sizes and the way out, when it does
// not fit the memory the system reports available; unknown availability does not refuse.
TEST(InMemoryRefusal, NamesSizesAndTheWayOut) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  EXPECT_FALSE(in_memory_refusal(100 * kMiB, 100 * kMiB, "ck").has_value());
  EXPECT_FALSE(in_memory_refusal(100 * kMiB, std::nullopt, "ck").has_value());
  const auto why = in_memory_refusal(1457 * kMiB + 1, 800 * kMiB, "/models/ck");
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why,
            "reading /models/ck into memory needs 1458 MiB but the system has 800 MiB available; "
            "map it instead (--mmap)");
}

TEST(InMemoryRefusal, ReadsAvailableMemoryOnLinux) {
  const auto available = available_memory_bytes();
  ASSERT_TRUE(available.has_value());
  EXPECT_GT(*available, uint64_t{1} << 20);
}

}  // namespace
}  // namespace drama

// Every refusal of a hostile or broken safetensors file or sharded checkpoint, each with a crafted
// file: one drama::Error that names the file (and the tensor where there is one).
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "format/safetensors_testing.h"
#include "util/error.h"

namespace drama {
namespace {

using testing::craft;
using testing::ScratchDir;
using testing::write_bytes;
using testing::write_text;
using namespace std::string_literals;  // "...\0..."s keeps embedded NULs

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error mentioning " << *parts.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Writes `bytes` as bad.safetensors, opens it, expects one Error naming the file and `parts`.
void expect_file_refused(const std::vector<uint8_t>& bytes,
                         std::initializer_list<std::string> parts) {
  ScratchDir dir;
  const auto path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  expect_error([&] { SafetensorsFile f(path); }, {path.string()});
  expect_error([&] { SafetensorsFile f(path); }, parts);
  // The parser alone gives the same verdict on the same bytes.
  EXPECT_THROW(parse_safetensors_header(bytes, bytes.size(), "bytes"), Error);
}

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

TEST(SafetensorsRefusals, ShorterThanEightBytes) {
  expect_file_refused({}, {"shorter than the 8-byte"});
  expect_file_refused({1, 0, 0}, {"shorter than the 8-byte"});
}

TEST(SafetensorsRefusals, HeaderLengthBeyondFile) {
  auto b = craft("{}");
  b[0] = 200;
  expect_file_refused(b, {"header length 200", "beyond the end"});
}

TEST(SafetensorsRefusals, HeaderOver100MiB) {
  auto b = craft("{}");
  const uint64_t n = kMaxSafetensorsHeader + 1;
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  expect_file_refused(b, {"100 MiB"});
}

TEST(SafetensorsRefusals, InvalidJson) {
  expect_file_refused(craft(R"({"a": )"), {"invalid JSON"});
  expect_file_refused(craft(""), {"invalid JSON"});
  expect_file_refused(craft("{}\0\0\0\0\0\0"s), {"invalid JSON", "NUL"});
  // A NUL would otherwise hide the rest of the header from the parser.
  expect_file_refused(craft("{}\0\"w\": 1}"s), {"NUL"});
  expect_file_refused(craft("{\"\xff\": 1}"), {"invalid JSON"});  // not UTF-8
}

TEST(SafetensorsRefusals, HeaderNotAnObject) {
  expect_file_refused(craft("[1, 2]"), {"not a JSON object"});
  expect_file_refused(craft("\"text\""), {"not a JSON object"});
}

TEST(SafetensorsRefusals, DeepNesting) {
  expect_file_refused(craft(std::string(1000, '[') + std::string(1000, ']')), {"nests deeper"});
}

TEST(SafetensorsRefusals, EntryNotAnObject) {
  expect_file_refused(craft(R"({"w": [1, 2]})"), {"'w'", "not a JSON object"});
}

TEST(SafetensorsRefusals, DtypeMissingOrWrongType) {
  expect_file_refused(craft(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", {0}),
                      {"'w'", "'dtype'"});
  expect_file_refused(craft(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 1]}})", {0}),
                      {"'w'", "'dtype'"});
}

TEST(SafetensorsRefusals, UnknownDtype) {
  expect_file_refused(craft(R"({"w": )" + entry("F4", "[1]", "[0, 1]") + "}", {0}),
                      {"'w'", "unknown dtype 'F4'"});
  expect_file_refused(craft(R"({"w": )" + entry("f32", "[1]", "[0, 4]") + "}", {0, 0, 0, 0}),
                      {"'w'", "unknown dtype 'f32'"});
}

TEST(SafetensorsRefusals, ShapeMissingOrWrongType) {
  expect_file_refused(craft(R"({"w": {"dtype": "U8", "data_offsets": [0, 1]}})", {0}),
                      {"'w'", "'shape'"});
  expect_file_refused(craft(R"({"w": {"dtype": "U8", "shape": 1, "data_offsets": [0, 1]}})", {0}),
                      {"'w'", "'shape'"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[1.0]", "[0, 1]") + "}", {0}),
                      {"'w'", "non-integer dimension"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[\"1\"]", "[0, 1]") + "}", {0}),
                      {"'w'", "non-integer dimension"});
}

TEST(SafetensorsRefusals, NegativeDimension) {
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[-1]", "[0, 0]") + "}"),
                      {"'w'", "negative"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[18446744073709551615]", "[0, 0]") + "}"),
                      {"'w'", "oversized dimension"});
}

TEST(SafetensorsRefusals, ShapeProductOverflows) {
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[4294967296, 4294967296]", "[0, 0]") + "}"),
                      {"'w'", "overflows"});
  // Fits as an element count but not in bytes.
  expect_file_refused(craft(R"({"w": )" + entry("F64", "[4611686018427387904]", "[0, 0]") + "}"),
                      {"'w'", "overflows"});
  // A zero dimension does not hide an overflow in a product computed left to right.
  expect_file_refused(
      craft(R"({"w": )" + entry("U8", "[4294967296, 4294967296, 0]", "[0, 0]") + "}"),
      {"'w'", "overflows"});
}

TEST(SafetensorsRefusals, DataOffsetsMissingOrWrongType) {
  expect_file_refused(craft(R"({"w": {"dtype": "U8", "shape": [1]}})", {0}),
                      {"'w'", "'data_offsets'"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[1]", "[0]") + "}", {0}),
                      {"'w'", "'data_offsets'"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[1]", "[0, 1, 2]") + "}", {0}),
                      {"'w'", "'data_offsets'"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[1]", "[0, \"1\"]") + "}", {0}),
                      {"'w'", "'data_offsets'"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[1]", "[0.0, 1.0]") + "}", {0}),
                      {"'w'", "'data_offsets'"});
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[0]", "[-1, -1]") + "}"),
                      {"'w'", "negative"});
}

TEST(SafetensorsRefusals, UnknownEntryField) {
  expect_file_refused(
      craft(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "stride": [1]}})", {0}),
      {"'w'", "unknown field 'stride'"});
}

TEST(SafetensorsRefusals, EmptyTensorName) {
  expect_file_refused(craft(R"({"": )" + entry("U8", "[1]", "[0, 1]") + "}", {0}), {"empty name"});
}

TEST(SafetensorsRefusals, ShapeSizeDisagreesWithByteRange) {
  expect_file_refused(craft(R"({"w": )" + entry("F32", "[2]", "[0, 4]") + "}", {0, 0, 0, 0}),
                      {"'w'", "8 bytes", "cover 4 bytes"});
}

TEST(SafetensorsRefusals, RangeBeyondDataSection) {
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[4]", "[0, 4]") + "}", {0, 0}),
                      {"'w'", "beyond the data section of 2 bytes"});
  expect_file_refused(
      craft(R"({"w": )" + entry("U8", "[0]", "[18446744073709551615, 18446744073709551615]") + "}"),
      {"'w'", "beyond the data section"});
}

TEST(SafetensorsRefusals, RangeEndsBeforeItBegins) {
  expect_file_refused(craft(R"({"w": )" + entry("U8", "[0]", "[2, 1]") + "}", {0, 0}),
                      {"'w'", "end before they begin"});
}

TEST(SafetensorsRefusals, OverlappingRanges) {
  expect_file_refused(craft(R"({"a": )" + entry("U8", "[4]", "[0, 4]") + R"(, "b": )" +
                                entry("U8", "[2]", "[2, 4]") + "}",
                            {0, 0, 0, 0}),
                      {"'b'", "overlaps tensor 'a'"});
  // Two tensors sharing the same bytes.
  expect_file_refused(craft(R"({"a": )" + entry("U8", "[4]", "[0, 4]") + R"(, "b": )" +
                                entry("U8", "[4]", "[0, 4]") + "}",
                            {0, 0, 0, 0}),
                      {"overlaps"});
}

TEST(SafetensorsRefusals, GapBetweenTensors) {
  expect_file_refused(craft(R"({"a": )" + entry("U8", "[1]", "[0, 1]") + R"(, "b": )" +
                                entry("U8", "[2]", "[2, 4]") + "}",
                            {0, 0, 0, 0}),
                      {"gap of 1 bytes before tensor 'b'"});
  expect_file_refused(craft(R"({"a": )" + entry("U8", "[1]", "[3, 4]") + "}", {0, 0, 0, 0}),
                      {"gap of 3 bytes before tensor 'a'"});
}

TEST(SafetensorsRefusals, TrailingBytes) {
  expect_file_refused(craft(R"({"a": )" + entry("U8", "[1]", "[0, 1]") + "}", {0, 0, 0}),
                      {"2 trailing bytes"});
  expect_file_refused(craft("{}", {0}), {"1 trailing bytes"});
}

TEST(SafetensorsRefusals, DuplicateNames) {
  expect_file_refused(craft(R"({"a": )" + entry("U8", "[1]", "[0, 1]") + R"(, "a": )" +
                                entry("U8", "[1]", "[1, 2]") + "}",
                            {0, 0}),
                      {"duplicate key 'a'"});
  expect_file_refused(
      craft(R"({"a": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})", {0}),
      {"duplicate key 'dtype'"});
  expect_file_refused(craft(R"({"__metadata__": {"k": "1", "k": "2"}})"), {"duplicate key 'k'"});
}

TEST(SafetensorsRefusals, MetadataNotAnObjectOfStrings) {
  expect_file_refused(craft(R"({"__metadata__": ["a"]})"), {"__metadata__", "not a JSON object"});
  expect_file_refused(craft(R"({"__metadata__": {"total": 3}})"),
                      {"__metadata__", "'total'", "not a string"});
  expect_file_refused(craft(R"({"__metadata__": {"n": null}})"), {"'n'", "not a string"});
}

TEST(SafetensorsRefusals, NotARegularFile) {
  ScratchDir dir;
  expect_error([&] { SafetensorsFile f(dir.path()); }, {dir.path().string(), "not a regular file"});
  expect_error([&] { SafetensorsFile f(dir / "absent.safetensors"); }, {"absent.safetensors"});
}

// --- sharded checkpoints -------------------------------------------------------------------

// Writes one shard holding `names` (U8 [1] each).
void write_shard(const std::filesystem::path& path, std::initializer_list<std::string> names) {
  SafetensorsWriter w;
  for (const auto& n : names) w.add(n, DType::U8, {1}, std::vector<uint8_t>{1});
  w.write(path);
}

void write_index(const std::filesystem::path& dir, const nlohmann::json& weight_map) {
  write_text(
      dir / "model.safetensors.index.json",
      nlohmann::json({{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}).dump());
}

TEST(SafetensorsRefusals, DirectoryMissingOrEmpty) {
  ScratchDir dir;
  expect_error([&] { TensorSet s(dir.path()); }, {dir.path().string(), "neither"});
  expect_error([&] { TensorSet s(dir / "absent"); }, {"absent", "not a directory"});
}

TEST(SafetensorsRefusals, IndexInvalidJson) {
  ScratchDir dir;
  write_text(dir / "model.safetensors.index.json", "{\"weight_map\": {");
  expect_error([&] { TensorSet s(dir.path()); }, {"model.safetensors.index.json", "invalid JSON"});
}

TEST(SafetensorsRefusals, IndexLacksWeightMap) {
  ScratchDir dir;
  write_text(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { TensorSet s(dir.path()); }, {"model.safetensors.index.json", "'weight_map'"});
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": ["a"]})");
  expect_error([&] { TensorSet s(dir.path()); }, {"model.safetensors.index.json", "'weight_map'"});
  write_text(dir / "model.safetensors.index.json", R"([1])");
  expect_error([&] { TensorSet s(dir.path()); }, {"model.safetensors.index.json", "'weight_map'"});
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": {}})");
  expect_error([&] { TensorSet s(dir.path()); }, {"model.safetensors.index.json", "no tensors"});
}

TEST(SafetensorsRefusals, IndexEntryNotAString) {
  ScratchDir dir;
  write_index(dir.path(), {{"a", 3}});
  expect_error([&] { TensorSet s(dir.path()); }, {"index.json", "'a'", "not a string"});
}

TEST(SafetensorsRefusals, IndexDuplicateTensor) {
  ScratchDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "a": "s1.safetensors"}})");
  expect_error([&] { TensorSet s(dir.path()); }, {"index.json", "duplicate key 'a'"});
}

TEST(SafetensorsRefusals, IndexPointsAtMissingShard) {
  ScratchDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  expect_error([&] { TensorSet s(dir.path()); },
               {"index.json", "'s2.safetensors'", "does not exist"});
}

TEST(SafetensorsRefusals, ShardLacksMappedTensor) {
  ScratchDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_shard(dir / "s2.safetensors", {"b"});
  write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}});
  expect_error([&] { TensorSet s(dir.path()); },
               {"index.json", "'b'", "'s1.safetensors'", "does not contain"});
}

TEST(SafetensorsRefusals, TensorInShardMappedElsewhere) {
  ScratchDir dir;
  write_shard(dir / "s1.safetensors", {"a", "b"});
  write_shard(dir / "s2.safetensors", {"b"});
  write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  expect_error([&] { TensorSet s(dir.path()); },
               {"s1.safetensors holds tensor 'b'", "maps to shard 's2.safetensors'"});
}

TEST(SafetensorsRefusals, TensorInShardNotInIndex) {
  ScratchDir dir;
  write_shard(dir / "s1.safetensors", {"a", "extra"});
  write_index(dir.path(), {{"a", "s1.safetensors"}});
  expect_error([&] { TensorSet s(dir.path()); },
               {"s1.safetensors holds tensor 'extra'", "does not list"});
}

TEST(SafetensorsRefusals, ShardNameEscapesDirectory) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "sub");
  write_shard(dir / "sub" / "s1.safetensors", {"a"});
  write_shard(dir / "s1.safetensors", {"a"});
  for (const std::string bad : {"sub/s1.safetensors", "../s1.safetensors", "..", "/etc/passwd",
                                "sub\\s1.safetensors", ""}) {
    write_index(dir.path(), {{"a", bad}});
    expect_error([&] { TensorSet s(dir.path()); }, {"index.json", "'a'", "not a plain file name"});
  }
}

TEST(SafetensorsRefusals, CorruptShardNamesShard) {
  ScratchDir dir;
  write_bytes(dir / "s1.safetensors", craft("{", {}));
  write_index(dir.path(), {{"a", "s1.safetensors"}});
  expect_error([&] { TensorSet s(dir.path()); }, {"s1.safetensors", "invalid JSON"});
}

TEST(SafetensorsRefusals, CorruptSingleFileNamesFile) {
  ScratchDir dir;
  write_bytes(dir / "model.safetensors",
              craft(R"({"w": )" + entry("U8", "[2]", "[0, 2]") + "}", {0}));
  expect_error([&] { TensorSet s(dir.path()); },
               {"model.safetensors", "'w'", "beyond the data section"});
  expect_error([&] { (void)TensorSet::single(dir / "model.safetensors"); },
               {"model.safetensors", "'w'"});
}

}  // namespace
}  // namespace drama

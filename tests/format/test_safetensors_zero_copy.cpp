// labels: slow
// Zero-copy check: opening a >= 2 GiB checkpoint maps it without reading it, so resident memory
// grows by far less than the file until tensors are touched. The file is sparse (header written,
// data section made by ftruncate), so it costs no disk and takes well under a second to build.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "format/safetensors.h"
#include "format/safetensors_testing.h"

namespace drama {
namespace {

int64_t vm_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

TEST(SafetensorsZeroCopy, OpeningTwoGiBDoesNotReadIt) {
  testing::ScratchDir dir;
  const auto path = dir / "model.safetensors";
  // Four F32 tensors of 160 Mi elements (640 MiB each): 2.5 GiB of data.
  constexpr uint64_t kElems = 160ull << 20, kBytes = kElems * 4, kTensors = 4;
  std::string header = "{";
  for (uint64_t i = 0; i < kTensors; ++i)
    header += (i ? "," : "") + std::string("\"layers.") + std::to_string(i) +
              ".weight\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(kElems) +
              "],\"data_offsets\":[" + std::to_string(i * kBytes) + "," +
              std::to_string((i + 1) * kBytes) + "]}";
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  testing::write_bytes(path, testing::craft(header));
  const uint64_t file_size = 8 + header.size() + kTensors * kBytes;
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(file_size)), 0);

  const int64_t before = vm_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  TensorSet set(dir.path());
  const double open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t opened = vm_rss_kib();
  ASSERT_EQ(set.total_bytes(), kTensors * kBytes);

  // Touch one float per 4 KiB page of the first 64 MiB of one tensor: only those pages come in.
  auto v = set.view("layers.2.weight").as<float>();
  ASSERT_EQ(v.size(), kElems);
  double sum = 0;
  for (size_t i = 0; i < (64u << 20) / 4; i += 1024) sum += v[i];
  const int64_t touched = vm_rss_kib();
  EXPECT_EQ(sum, 0.0);

  const double file_mib = double(file_size) / (1 << 20);
  std::printf(
      "file %.1f MiB; VmRSS before open %lld KiB, after open %lld KiB (+%lld KiB, %.4f%% of "
      "the file) in %.2f ms; after touching 64 MiB of one tensor %lld KiB (+%lld KiB)\n",
      file_mib, (long long)before, (long long)opened, (long long)(opened - before),
      100.0 * double(opened - before) * 1024 / double(file_size), open_ms, (long long)touched,
      (long long)(touched - opened));
  ASSERT_GE(file_size, 2ull << 30);
  EXPECT_LT(double(opened - before) * 1024, 0.05 * double(file_size));
  // Touching pages does make them resident (the measurement sees mapped pages at all).
  EXPECT_GT(touched - opened, 32 * 1024);
}

}  // namespace
}  // namespace drama

// `drama bench verify`: how fast a checkpoint is verified (size, then SHA-256 of every file),
// beside three ceilings measured in the same run: reading the same files without hashing,
// SHA-256 of a buffer already in memory, and a memory copy. One JSON object on stdout; no paths.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <vector>

#include "cli/bench.h"
#include "format/manifest.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/progress.h"

namespace drama::cli {

namespace {

namespace fs = std::filesystem;

struct VerifyBenchOptions {
  std::string dir, manifest, json, tmp;
  double size_gib = 0;
  int repeats = 3;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The median of `repeats` timings of `f`: wall-clock and this thread's CPU time (the CPU figure
// stays meaningful on a machine shared with other work).
struct Timing {
  double wall_s = 0, cpu_s = 0;
};
template <typename F>
Timing median_seconds(int repeats, F&& f) {
  std::vector<double> wall, cpu;
  for (int i = 0; i < repeats; ++i) {
    const auto t = std::chrono::steady_clock::now();
    const double c = thread_cpu_seconds();
    f();
    wall.push_back(seconds_since(t));
    cpu.push_back(thread_cpu_seconds() - c);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Writes `bytes` of xorshift noise (incompressible, cheap to make) into `path`.
void write_noise(const fs::path& path, uint64_t bytes, uint64_t seed, Progress& progress) {
  std::ofstream out(path, std::ios::binary);
  std::vector<uint64_t> buf(1 << 19);  // 4 MiB
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t done = 0; done < bytes;) {
    for (auto& v : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = x;
    }
    const uint64_t n = std::min<uint64_t>(bytes - done, buf.size() * 8);
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(n));
    done += n;
    progress.add(n);
  }
  if (!out.flush()) throw Error("bench verify: cannot write " + path.string());
}

// A checkpoint-shaped directory: config.json plus shards of at most 1 GiB.
Manifest make_synthetic(const fs::path& dir, double size_gib) {
  const uint64_t total = static_cast<uint64_t>(size_gib * (1ull << 30));
  const uint64_t shard = 1ull << 30;
  const uint64_t shards = std::max<uint64_t>(1, (total + shard - 1) / shard);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{\"model_type\": \"drama3\"}\n";
  std::vector<std::string> files = {"config.json"};
  Progress progress("bench verify: writing", total);
  for (uint64_t i = 0; i < shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05llu-of-%05llu.safetensors",
                  static_cast<unsigned long long>(i + 1), static_cast<unsigned long long>(shards));
    write_noise(dir / name, std::min(shard, total - i * shard), i + 1, progress);
    files.push_back(name);
  }
  progress.finish();
  return compute_manifest(dir, files, "synthetic", "synthetic", "bench/synthetic",
                          std::string(40, '0'));
}

// Reads every listed file the way sha256_file does (4 MiB reads), without hashing.
uint64_t read_all(const fs::path& dir, const Manifest& m) {
  std::vector<uint8_t> buf(4 << 20);
  uint64_t total = 0;
  for (const auto& f : m.files) {
    const int fd = ::open((dir / f.path).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("bench verify: cannot open " + f.path + ": " + std::strerror(errno));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += n;
    ::close(fd);
  }
  return total;
}

int run_verify_bench(const VerifyBenchOptions& o) {
  const bool synthetic = o.size_gib > 0;
  if (synthetic == !o.dir.empty())
    throw UsageError("bench verify needs either --dir DIR --manifest FILE or --size-gib N");
  if (!synthetic && o.manifest.empty()) throw UsageError("bench verify: --dir needs --manifest");
  if (o.repeats < 1) throw UsageError("bench verify: --repeats must be at least 1");
  fs::path dir = o.dir;
  Manifest m;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup;
  if (synthetic) {
    const fs::path base = o.tmp.empty() ? fs::temp_directory_path() : fs::path(o.tmp);
    dir = base / ("drama-bench-verify-" + std::to_string(::getpid()));
    if (fs::exists(dir)) throw Error("bench verify: " + dir.string() + " already exists");
    cleanup.dir = dir;
    m = make_synthetic(dir, o.size_gib);  // hashing it once also warms the page cache
  } else {
    m = load_manifest(o.manifest);
  }
  uint64_t bytes = 0;
  for (const auto& f : m.files) bytes += f.size;

  VerifyReport report;
  const Timing verify_t = median_seconds(o.repeats, [&] { report = verify_directory(dir, m); });
  if (!report.ok())
    throw Error("bench verify: the directory does not match the manifest (" +
                report.problems.front().path + ": " + report.problems.front().reason + ")");
  volatile uint64_t sink = 0;
  const Timing read_t = median_seconds(o.repeats, [&] { sink = sink + read_all(dir, m); });

  const size_t buffer = 256u << 20;  // beyond any last-level cache
  std::vector<uint8_t> a(buffer, 1), b(buffer, 2);
  const Timing sha_t = median_seconds(o.repeats, [&] { sink = sink + sha256_hex(a).size(); });
  const Timing copy_t = median_seconds(o.repeats, [&] { std::memcpy(b.data(), a.data(), buffer); });

  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const double verify_gb_s = bytes / verify_t.wall_s / 1e9;
  const double read_gb_s = bytes / read_t.wall_s / 1e9;
  const double sha_gb_s = buffer / sha_t.wall_s / 1e9;
  const nlohmann::json out = {
      {"bench", "verify"},
      {"date", date},
      {"cpu", cpu_model()},
      {"source", synthetic ? "synthetic" : "directory"},
      {"files", m.files.size()},
      {"bytes", bytes},
      {"repeats", o.repeats},
      {"threads", 1},
      {"verify_s", verify_t.wall_s},
      {"verify_gb_s", verify_gb_s},
      {"verify_gb_per_cpu_s", bytes / verify_t.cpu_s / 1e9},
      {"ceiling",
       {{"file_read_gb_s", read_gb_s},
        {"file_read_gb_per_cpu_s", bytes / read_t.cpu_s / 1e9},
        {"sha256_in_memory_gb_s", sha_gb_s},
        {"sha256_in_memory_gb_per_cpu_s", buffer / sha_t.cpu_s / 1e9},
        {"memory_copy_gb_s", buffer / copy_t.wall_s / 1e9},
        {"buffer_mib", buffer >> 20}}},
      {"of_file_read", verify_gb_s / read_gb_s},
      {"of_sha256_in_memory", verify_gb_s / sha_gb_s},
      {"note",
       "medians; files in the page cache (read just before), so file_read is the cached-read "
       "ceiling, not disk speed; one thread hashes one file at a time; copy counts bytes copied; "
       "*_per_cpu_s divide by this thread's CPU time, robust to a machine shared with other work"}};
  const std::string text = out.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  if (!o.json.empty()) write_text_file_atomic(o.json, text);
  return 0;
}

}  // namespace

void register_bench_verify(CLI::App& bench, std::function<int()>& run) {
  auto o = std::make_shared<VerifyBenchOptions>();
  auto* sub = bench.add_subcommand("verify", "Checkpoint verification (size + SHA-256) speed");
  sub->add_option("--dir", o->dir, "checkpoint directory to verify");
  sub->add_option("--manifest", o->manifest, "its manifest");
  sub->add_option("--size-gib", o->size_gib, "instead: write a synthetic checkpoint of N GiB");
  sub->add_option("--tmp", o->tmp, "where the synthetic checkpoint goes (default: system temp)");
  sub->add_option("--repeats", o->repeats, "timed repeats; the median is reported (3)");
  sub->add_option("--json", o->json, "also write the JSON object to this file");
  sub->callback([&run, o] { run = [o] { return run_verify_bench(*o); }; });
}

}  // namespace drama::cli

// `drama bench gemv`: the W4A16 NVFP4 matrix-vector product (and the BF16 one at the same shape)
// timed against the memory ceilings measured in the same run: a single-thread streaming read of
// a buffer larger than the last-level cache, and a memcpy copy. Weights are random and rotated
// among enough copies that none is cache resident, so GB/s counts bytes that came from memory.
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "backend/backend.h"
#include "cli/bench.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/memory.h"

namespace drama::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct GemvOptions {
  std::string format = "nvfp4";
  int64_t m = 4096, k = 14336;
  std::vector<int64_t> rows = {1};
  int threads = 1;
  std::string backend = "cpu";
  double seconds = 1.0;  // time budget per measurement window
  int repeats = 1;       // windows per (format, rows), taken in rotation
  std::string json;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Bytes that surely exceed what the caches can hold: twice the reported last-level cache (on a
// VM often the whole socket's), at least 256 MiB and at most 1 GiB.
size_t beyond_cache_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t llc = l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
  return std::clamp<size_t>(2 * llc, size_t{256} << 20, size_t{1} << 30);
}

// The 1-minute load average: on a shared machine, the context the figures were taken in.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1.0;
  in >> load;
  return load;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double median_s, min_s;
  double cpu_s;  // median CPU time of the calling thread: on a shared machine, time not stolen
};

// Times fn() repeatedly within a budget.
template <class F>
Timing time_calls(F&& fn, double budget) {
  fn();  // warm-up
  std::vector<double> t, cpu;
  const auto start = Clock::now();
  while (t.size() < 5 || (t.size() < 1000 &&
                          std::chrono::duration<double>(Clock::now() - start).count() < budget)) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    cpu.push_back(thread_cpu_seconds() - c0);
  }
  return {median(t), *std::min_element(t.begin(), t.end()), median(cpu)};
}

__attribute__((target("avx2"))) uint64_t read_sum_avx2(const uint8_t* p, size_t bytes) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}

uint64_t read_sum(const uint8_t* p, size_t bytes) {
  if (__builtin_cpu_supports("avx2")) return read_sum_avx2(p, bytes);
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s ^= v;
  }
  return s;
}

nlohmann::json measure_ceiling(double budget) {
  const size_t bytes = beyond_cache_bytes();
  auto* a = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  if (!a || !b) throw Error("bench gemv: cannot allocate the bandwidth buffers.");
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  volatile uint64_t sink = 0;
  const double read_s = time_calls([&] { sink = sink + read_sum(a, bytes); }, budget).median_s;
  const double copy_s = time_calls([&] { std::memcpy(b, a, bytes); }, budget).median_s;
  std::free(a);
  std::free(b);
  return {{"buffer_mib", bytes >> 20},
          {"read_gb_s", bytes / read_s / 1e9},
          {"copy_gb_s", bytes / copy_s / 1e9},
          {"note", "single thread; copy counts bytes copied (each is read once and written once)"}};
}

// Random weights, several copies so that the set is larger than the last-level cache, in one
// anonymous region with transparent huge pages: how the engine holds weights by default.
// (In alternating runs on the dev VM, 4 KiB pages made the two-row NVFP4 product at 4096 x 14336
// 2.29 instead of 1.97-2.01 ms four times in a row, and no slower in later runs: noise there is
// as large as the effect. The one-row product did not change.)
struct WeightSet {
  std::vector<LinearWeight> views;
  size_t bytes_each = 0;
  uint8_t* region = nullptr;
  size_t region_bytes = 0;
  WeightSet(WeightFormat format, int64_t m, int64_t k, std::mt19937& rng) {
    const size_t data_bytes = format == WeightFormat::NVFP4 ? m * k / 2 : m * k * 2;
    const size_t scale_bytes = format == WeightFormat::NVFP4 ? m * k / 16 : 0;
    bytes_each = data_bytes + scale_bytes;
    const size_t stride = (bytes_each + 63) / 64 * 64;
    const size_t copies = std::max<size_t>(2, beyond_cache_bytes() / bytes_each);
    region_bytes = stride * copies;
    region = static_cast<uint8_t*>(map_huge_anonymous(region_bytes));
    if (!region) throw Error("bench gemv: cannot allocate the weights");
    uint8_t* data = region;
    uint8_t* scales = region + data_bytes;
    std::uniform_int_distribution<int> byte(0, 255), scale(0x28, 0x48);
    if (format == WeightFormat::NVFP4) {
      for (size_t i = 0; i < data_bytes; ++i) data[i] = static_cast<uint8_t>(byte(rng));
    } else {  // weights of a trained layer's size; random bits would include denormals
      std::normal_distribution<float> nd(0.0f, 0.02f);
      for (size_t i = 0; i < data_bytes; i += 2) {
        const uint16_t h = f32_to_bf16(nd(rng));
        std::memcpy(data + i, &h, 2);
      }
    }
    for (size_t i = 0; i < scale_bytes; ++i) scales[i] = static_cast<uint8_t>(scale(rng));
    for (size_t c = 1; c < copies; ++c)  // same values at other addresses
      std::memcpy(region + c * stride, region, bytes_each);
    for (size_t c = 0; c < copies; ++c)
      views.push_back({format, m, k, region + c * stride, region + c * stride + data_bytes, 0.01f});
  }
  ~WeightSet() { ::munmap(region, region_bytes); }
  WeightSet(const WeightSet&) = delete;
  WeightSet& operator=(const WeightSet&) = delete;
};

// One (format, rows) setting: its timing windows, taken in rotation with the other settings so
// that a burst of load on a shared machine lands in one window of each rather than in all of one.
struct Series {
  WeightSet* weights;
  int64_t rows;
  std::vector<float> x, y;
  size_t next = 0;
  std::vector<Timing> windows;
};

nlohmann::json summarize(const Series& s) {
  std::vector<double> medians, cpu;
  double best = s.windows.front().min_s;
  for (const Timing& t : s.windows) {
    medians.push_back(t.median_s);
    cpu.push_back(t.cpu_s);
    best = std::min(best, t.min_s);
  }
  const double med = median(medians);
  nlohmann::json samples = nlohmann::json::array();
  for (double m : medians) samples.push_back(m * 1e3);
  const WeightSet& w = *s.weights;
  return {{"format", w.views.front().format == WeightFormat::NVFP4 ? "nvfp4" : "bf16"},
          {"rows", s.rows},
          {"ms", med * 1e3},
          {"ms_min", best * 1e3},
          {"window_medians_ms", samples},
          {"thread_cpu_ms", median(cpu) * 1e3},
          {"weight_mb", w.bytes_each / 1e6},
          {"gb_s", w.bytes_each / med / 1e9},
          {"weight_copies", w.views.size()},
          {"weight_memory",
           "anonymous, transparent huge pages requested (as the engine holds weights by default)"}};
}

int run_gemv(const GemvOptions& o) {
  if (o.format != "nvfp4" && o.format != "bf16")
    throw UsageError("--format must be nvfp4 or bf16, not '" + o.format + "'.");
  if (o.m <= 0 || o.k <= 0 || o.k % 16 != 0)
    throw UsageError("--m must be positive and --k a positive multiple of 16.");
  for (int64_t r : o.rows)
    if (r <= 0) throw UsageError("--rows must be positive.");
  if (o.repeats < 1) throw UsageError("--repeats must be at least 1.");
  auto be = make_backend({o.backend, o.threads});
  std::mt19937 rng(1234);
  const WeightFormat first = o.format == "nvfp4" ? WeightFormat::NVFP4 : WeightFormat::BF16;
  const WeightFormat second =
      first == WeightFormat::NVFP4 ? WeightFormat::BF16 : WeightFormat::NVFP4;
  WeightSet first_weights(first, o.m, o.k, rng), second_weights(second, o.m, o.k, rng);
  std::vector<Series> series;
  for (WeightSet* w : {&first_weights, &second_weights})
    for (int64_t rows : o.rows) {
      Series s{w, rows, std::vector<float>(rows * o.k), std::vector<float>(rows * o.m), 0, {}};
      std::normal_distribution<float> nd;
      for (auto& v : s.x) v = nd(rng);
      series.push_back(std::move(s));
    }
  for (int r = 0; r < o.repeats; ++r)
    for (Series& s : series)
      s.windows.push_back(time_calls(
          [&] {
            be->linear(s.weights->views[s.next], s.x.data(), s.rows, s.y.data());
            s.next = (s.next + 1) % s.weights->views.size();
          },
          o.seconds));
  nlohmann::json runs = nlohmann::json::array();
  for (const Series& s : series) runs.push_back(summarize(s));
  nlohmann::json ceiling = measure_ceiling(o.seconds);
  for (auto& r : runs)
    r["of_read_ceiling"] = r["gb_s"].get<double>() / ceiling["read_gb_s"].get<double>();
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const std::string name = be->name();
  nlohmann::json out = {
      {"bench", "gemv"},
      {"date", date},
      {"cpu", cpu_model()},
      {"backend", name},
      {"isa", name.substr(name.find('(') + 1, name.find(',') - name.find('(') - 1)},
      {"threads", o.threads},
      {"repeats", o.repeats},
      {"note",
       "ms: the median of the windows' per-call medians (window_medians_ms, one window of "
       "about `seconds` per setting and repeat, settings in rotation); ms_min: the fastest "
       "call"},
      {"load_average_1min", load_average()},
      {"cores_online", sysconf(_SC_NPROCESSORS_ONLN)},
      {"m", o.m},
      {"k", o.k},
      {"runs", runs},
      {"ceiling", ceiling}};
  const std::string text = out.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  if (!o.json.empty()) write_text_file_atomic(o.json, text);
  return 0;
}

}  // namespace

void register_bench_gemv(CLI::App& bench, std::function<int()>& run) {
  auto opts = std::make_shared<GemvOptions>();
  auto* sub = bench.add_subcommand("gemv", "NVFP4 (W4A16) and BF16 matrix-vector products");
  sub->add_option("--format", opts->format, "nvfp4 | bf16 (the other is timed beside it)");
  sub->add_option("--m", opts->m, "output features");
  sub->add_option("--k", opts->k, "input features (multiple of 16)");
  sub->add_option("--rows", opts->rows, "activation rows; a list times each (1,2)")->delimiter(',');
  sub->add_option("--threads", opts->threads, "CPU threads (0 = all cores)");
  sub->add_option("--backend", opts->backend, "auto | cpu | cuda");
  sub->add_option("--seconds", opts->seconds, "time budget per measurement window");
  sub->add_option("--repeats", opts->repeats,
                  "windows per setting, taken in rotation; the median window is reported");
  sub->add_option("--json", opts->json, "also write the JSON object to this file");
  sub->callback([&run, opts] { run = [opts] { return run_gemv(*opts); }; });
}

}  // namespace drama::cli

// Google Benchmark micro-benchmarks of the CPU matrix-vector products at the size of a large
// expert projection (m=4096 out, k=14336 in), per ISA path and row count, one thread. The
// weights are rotated among copies larger than the last-level cache so bytes come from memory.
// `drama bench gemv` reports the same figures with the measured bandwidth ceilings beside them.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "util/dtype.h"

namespace {

using drama::LinearWeight;
using drama::WeightFormat;
using drama::cpu::Isa;

constexpr int64_t kOut = 4096, kIn = 14336, kCopies = 8;

struct Weights {
  std::vector<std::vector<uint8_t>> data, scales;
  std::vector<LinearWeight> views;
  size_t bytes = 0;
  explicit Weights(WeightFormat format) {
    std::mt19937 rng(99);
    const size_t nd = format == WeightFormat::NVFP4 ? kOut * kIn / 2 : kOut * kIn * 2;
    const size_t ns = format == WeightFormat::NVFP4 ? kOut * kIn / 16 : 0;
    bytes = nd + ns;
    std::vector<uint8_t> d(nd), s(ns);
    std::uniform_int_distribution<int> byte(0, 255), scale(0x28, 0x48);
    if (format == WeightFormat::NVFP4) {
      for (auto& v : d) v = static_cast<uint8_t>(byte(rng));
    } else {
      std::normal_distribution<float> nd01(0.0f, 0.02f);
      for (size_t i = 0; i < nd; i += 2) {
        const uint16_t h = drama::f32_to_bf16(nd01(rng));
        d[i] = static_cast<uint8_t>(h);
        d[i + 1] = static_cast<uint8_t>(h >> 8);
      }
    }
    for (auto& v : s) v = static_cast<uint8_t>(scale(rng));
    for (int c = 0; c < kCopies; ++c) {
      data.push_back(d);
      scales.push_back(s);
    }
    for (int c = 0; c < kCopies; ++c)
      views.push_back({format, kOut, kIn, data[c].data(), scales[c].data(), 0.01f});
  }
};

void run(benchmark::State& state, WeightFormat format, Isa isa) {
  if (!drama::cpu::isa_supported(isa)) {
    state.SkipWithError("ISA not supported by this CPU");
    return;
  }
  static Weights nvfp4(WeightFormat::NVFP4), bf16(WeightFormat::BF16);
  const Weights& w = format == WeightFormat::NVFP4 ? nvfp4 : bf16;
  const int64_t rows = state.range(0);
  drama::cpu::CpuBackend be(1, isa);
  std::vector<float> x(rows * kIn, 0.5f), y(rows * kOut);
  size_t next = 0;
  for (auto _ : state) {
    be.linear(w.views[next], x.data(), rows, y.data());
    next = (next + 1) % w.views.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.bytes));
}

void BM_Nvfp4Avx512(benchmark::State& s) {
  run(s, WeightFormat::NVFP4, Isa::Avx512);
}
void BM_Nvfp4Avx2(benchmark::State& s) {
  run(s, WeightFormat::NVFP4, Isa::Avx2);
}
void BM_Bf16Avx512(benchmark::State& s) {
  run(s, WeightFormat::BF16, Isa::Avx512);
}
void BM_Bf16Avx2(benchmark::State& s) {
  run(s, WeightFormat::BF16, Isa::Avx2);
}

BENCHMARK(BM_Nvfp4Avx512)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nvfp4Avx2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bf16Avx512)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bf16Avx2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// Google Benchmark micro-benchmarks of the CPU matrix products, per ISA path and row count, one
// thread, at two shapes (the second argument): 0 = a large expert projection (m=4096 out,
// k=14336 in; the weights rotate among copies larger than the last-level cache so bytes come from
// memory), 1 = the CPU benchmark config's dense MLP projection (2816 out, 1024 in), where many
// rows (prefill chunks, several lanes) are compute-bound. The *Pairs variants give the same rows
// to the kernel two at a time (its row-pair tiles): one call beside the other, in one run.
// `drama bench gemv` reports the same figures with the measured bandwidth ceilings beside them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "util/dtype.h"

namespace {

using drama::LinearWeight;
using drama::WeightFormat;
using drama::cpu::Isa;

constexpr int64_t kCopies = 8;

struct Weights {
  std::vector<std::vector<uint8_t>> data, scales;
  std::vector<LinearWeight> views;
  size_t bytes = 0;
  Weights(WeightFormat format, int64_t kOut, int64_t kIn) {
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

void run(benchmark::State& state, WeightFormat format, Isa isa, bool pairs = false) {
  if (!drama::cpu::isa_supported(isa)) {
    state.SkipWithError("ISA not supported by this CPU");
    return;
  }
  static const Weights shapes[2][2] = {
      {{WeightFormat::NVFP4, 4096, 14336}, {WeightFormat::BF16, 4096, 14336}},
      {{WeightFormat::NVFP4, 2816, 1024}, {WeightFormat::BF16, 2816, 1024}}};
  const Weights& w = shapes[state.range(1)][format == WeightFormat::NVFP4 ? 0 : 1];
  const int64_t rows = state.range(0), kOut = w.views[0].out, kIn = w.views[0].in;
  drama::cpu::CpuBackend be(1, isa);
  std::vector<float> x(rows * kIn, 0.5f), y(rows * kOut);
  size_t next = 0;
  for (auto _ : state) {
    if (pairs) {
      for (int64_t r = 0; r < rows; r += 2)
        be.linear(w.views[next], x.data() + r * kIn, std::min<int64_t>(2, rows - r),
                  y.data() + r * kOut);
    } else {
      be.linear(w.views[next], x.data(), rows, y.data());
    }
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
void BM_Nvfp4Avx2Pairs(benchmark::State& s) {
  run(s, WeightFormat::NVFP4, Isa::Avx2, true);
}
void BM_Bf16Avx2Pairs(benchmark::State& s) {
  run(s, WeightFormat::BF16, Isa::Avx2, true);
}
void BM_Bf16Avx512(benchmark::State& s) {
  run(s, WeightFormat::BF16, Isa::Avx512);
}
void BM_Bf16Avx2(benchmark::State& s) {
  run(s, WeightFormat::BF16, Isa::Avx2);
}

void rows_and_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t shape : {0, 1})
    for (int64_t rows : {1, 2, 4, 8, 16, 64}) b->Args({rows, shape});
  b->Unit(benchmark::kMillisecond);
}
void many_rows(benchmark::internal::Benchmark* b) {
  for (int64_t shape : {0, 1})
    for (int64_t rows : {4, 8, 16, 64}) b->Args({rows, shape});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Nvfp4Avx512)->Apply(rows_and_shapes);
BENCHMARK(BM_Nvfp4Avx2)->Apply(rows_and_shapes);
BENCHMARK(BM_Nvfp4Avx2Pairs)->Apply(many_rows);
BENCHMARK(BM_Bf16Avx512)->Apply(rows_and_shapes);
BENCHMARK(BM_Bf16Avx2)->Apply(rows_and_shapes);
BENCHMARK(BM_Bf16Avx2Pairs)->Apply(many_rows);

}  // namespace

BENCHMARK_MAIN();

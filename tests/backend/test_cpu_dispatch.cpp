// make_backend and the CPU backend's ISA selection: refusals, DRAMA_CPU_ISA, names.
#include <cstdlib>

#include "backend/backend.h"
#include "cpu_test_util.h"
#include "util/error.h"

namespace drama::test {
namespace {

TEST(CpuDispatch, AutoAndCpuGiveTheCpuBackend) {
  auto be = make_backend({"cpu", 2});
  EXPECT_NE(be->name().find("cpu ("), std::string::npos);
  EXPECT_NE(be->name().find("2 threads"), std::string::npos);
#ifndef DRAMA_WITH_CUDA
  EXPECT_EQ(make_backend({"auto", 1})->name().rfind("cpu", 0), 0u);
#endif
}

TEST(CpuDispatch, Refusals) {
#ifndef DRAMA_WITH_CUDA
  try {
    make_backend({"cuda", 1});
    FAIL() << "an explicit cuda backend must not fall back";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without the CUDA backend"), std::string::npos);
  }
#endif
  EXPECT_THROW(make_backend({"tpu", 1}), UsageError);
  EXPECT_THROW(make_backend({"cpu", -1}), UsageError);
}

TEST(CpuDispatch, IsaForcedByEnvironment) {
  ::setenv("DRAMA_CPU_ISA", "scalar", 1);
  EXPECT_NE(make_backend({"cpu", 1})->name().find("scalar"), std::string::npos);
  ::setenv("DRAMA_CPU_ISA", "sse9", 1);
  EXPECT_THROW(make_backend({"cpu", 1}), Error);
  if (!cpu::isa_supported(cpu::Isa::Avx512)) {
    ::setenv("DRAMA_CPU_ISA", "avx512", 1);
    EXPECT_THROW(make_backend({"cpu", 1}), Error);
  }
  ::unsetenv("DRAMA_CPU_ISA");
  const auto best = cpu::select_isa();
  EXPECT_TRUE(cpu::isa_supported(best));
  EXPECT_THROW(cpu::CpuBackend(1, static_cast<cpu::Isa>(99)), Error);
}

// The pool hands out contiguous chunks covering [0, n) exactly once, for any thread count.
TEST(CpuDispatch, ThreadPoolCoversRangeOnce) {
  for (int threads : {1, 2, 3, 4}) {
    cpu::ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 64, 1001}) {
      std::vector<int> hits(n, 0);
      pool.parallel_for(n, 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[i];
      });
      for (int h : hits) ASSERT_EQ(h, 1) << threads << " threads, n=" << n;
    }
  }
}

}  // namespace
}  // namespace drama::test

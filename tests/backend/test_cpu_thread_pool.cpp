// The CPU thread pool: every index is covered exactly once in grain-sized contiguous chunks for
// any thread count, wait mode and split rule; back-to-back calls and calls after the workers have
// gone to sleep lose no wake-up; an exception from the caller's chunk reaches the caller after the
// workers are done.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace drama::test {
namespace {

using cpu::ThreadPool;

void expect_covers(ThreadPool& pool, int64_t n, int64_t grain, double work) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> chunks{0};
  auto fn = [&](int64_t b, int64_t e) {
    ASSERT_LT(b, e);
    ASSERT_TRUE(b % grain == 0) << "chunk start " << b << " not a multiple of grain " << grain;
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    chunks++;
  };
  if (work < 0)
    pool.parallel_for(n, grain, fn);
  else
    pool.parallel_for(n, grain, work, fn);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "index " << i;
  EXPECT_LE(chunks, pool.threads());
}

TEST(CpuThreadPool, CoversEveryIndexOnce) {
  for (auto wait : {ThreadPool::Wait::Spin, ThreadPool::Wait::Sleep})
    for (int threads : {1, 2, 3, 4, 7}) {
      ThreadPool split_all(threads, 0.0, wait), derived(threads, ThreadPool::kAutoSplit, wait);
      EXPECT_EQ(split_all.wait_mode(), wait);
      for (int64_t n : {1, 2, 3, 5, 16, 17, 100, 1000})
        for (int64_t grain : {1, 4, 16}) {
          expect_covers(split_all, n, grain, -1);
          expect_covers(split_all, n, grain, 1.0);
          expect_covers(derived, n, grain, 1e6);
          expect_covers(derived, n, grain, 1.0);
        }
    }
}

// Many calls in a row (workers spinning) and calls after a pause longer than the spin (workers
// asleep): each returns only when all its chunks are done.
TEST(CpuThreadPool, NoLostWakeUps) {
  for (auto wait : {ThreadPool::Wait::Spin, ThreadPool::Wait::Sleep}) {
    ThreadPool pool(3, 0.0, wait);
    std::vector<int64_t> out(300);
    for (int call = 0; call < 1000; ++call) {
      pool.parallel_for(static_cast<int64_t>(out.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = call;
      });
      for (int64_t v : out) ASSERT_EQ(v, call);
      if (call % 250 == 0)
        std::this_thread::sleep_for(std::chrono::nanoseconds(2 * ThreadPool::kSpinNs));
    }
  }
}

TEST(CpuThreadPool, CallerExceptionWaitsForWorkers) {
  ThreadPool pool(4, 0.0, ThreadPool::Wait::Spin);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.parallel_for(4, 1,
                                 [&](int64_t b, int64_t) {
                                   if (b == 0) throw std::runtime_error("chunk 0");
                                   std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                   finished++;
                                 }),
               std::runtime_error);
  EXPECT_EQ(finished, 3);
  // The pool stays usable.
  expect_covers(pool, 64, 1, -1);
}

TEST(CpuThreadPool, SplitRule) {
  ThreadPool fixed(4, 1000.0, ThreadPool::Wait::Sleep);
  std::atomic<int> chunks{0};
  auto count = [&](int64_t, int64_t) { chunks++; };
  fixed.parallel_for(100, 1, 19.0, count);  // 1900 units: inline on the caller
  EXPECT_EQ(chunks, 1);
  chunks = 0;
  fixed.parallel_for(100, 1, 20.0, count);  // 2000 units: two parts
  EXPECT_EQ(chunks, 2);
  chunks = 0;
  fixed.parallel_for(100, 1, 1e6, count);  // capped at the thread count
  EXPECT_EQ(chunks, 4);
  // Derived split: spin pools measure their fork/join cost, sleep pools use the fixed rule.
  ThreadPool spin(2, ThreadPool::kAutoSplit, ThreadPool::Wait::Spin);
  EXPECT_GT(spin.fork_join_seconds(), 0.0);
  EXPECT_GE(spin.min_work_per_thread(), ThreadPool::kSpinMinWorkFloor);
  EXPECT_LE(spin.min_work_per_thread(), ThreadPool::kSleepMinWork);
  ThreadPool sleep(2, ThreadPool::kAutoSplit, ThreadPool::Wait::Sleep);
  EXPECT_EQ(sleep.min_work_per_thread(), ThreadPool::kSleepMinWork);
}

}  // namespace
}  // namespace drama::test

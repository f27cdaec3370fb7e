// The CPU thread pool: every index is covered exactly once in grain-aligned contiguous chunks on at
// most threads() threads, for any thread count, wait mode and split rule; back-to-back calls and
// calls after the workers have gone to sleep lose no wake-up; an exception on the caller's thread
// reaches the caller once no worker is still running a chunk.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace drama::test {
namespace {

using cpu::ThreadPool;

struct Coverage {
  int chunks = 0;
  size_t threads = 0;
};

Coverage run_counted(ThreadPool& pool, int64_t n, int64_t grain, double work) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::mutex mutex;
  std::set<std::thread::id> ids;
  Coverage c;
  auto fn = [&](int64_t b, int64_t e) {
    EXPECT_LT(b, e);
    EXPECT_TRUE(b % grain == 0) << "chunk start " << b << " not a multiple of grain " << grain;
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    std::lock_guard lock(mutex);
    ids.insert(std::this_thread::get_id());
    ++c.chunks;
  };
  if (work < 0)
    pool.parallel_for(n, grain, fn);
  else
    pool.parallel_for(n, grain, work, fn);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << "index " << i;
  c.threads = ids.size();
  EXPECT_LE(c.threads, static_cast<size_t>(pool.threads()));
  return c;
}

TEST(CpuThreadPool, CoversEveryIndexOnce) {
  for (auto wait : {ThreadPool::Wait::Spin, ThreadPool::Wait::Sleep})
    for (int threads : {1, 2, 3, 4, 7}) {
      ThreadPool split_all(threads, 0.0, wait), derived(threads, ThreadPool::kAutoSplit, wait);
      EXPECT_EQ(split_all.wait_mode(), wait);
      for (int64_t n : {1, 2, 3, 5, 16, 17, 100, 1000})
        for (int64_t grain : {1, 4, 16}) {
          run_counted(split_all, n, grain, -1);
          run_counted(split_all, n, grain, 1.0);
          run_counted(derived, n, grain, 1e6);
          run_counted(derived, n, grain, 1.0);
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
  const auto caller = std::this_thread::get_id();
  std::atomic<int> running{0};
  EXPECT_THROW(pool.parallel_for(64, 1,
                                 [&](int64_t, int64_t) {
                                   running++;
                                   std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                   running--;
                                   if (std::this_thread::get_id() == caller)
                                     throw std::runtime_error("caller's chunk");
                                 }),
               std::runtime_error);
  EXPECT_EQ(running, 0);
  run_counted(pool, 64, 1, -1);  // the pool stays usable
}

TEST(CpuThreadPool, SplitRule) {
  ThreadPool fixed(4, 1000.0, ThreadPool::Wait::Sleep);
  Coverage c = run_counted(fixed, 100, 1, 19.0);  // 1900 units: inline on the caller
  EXPECT_EQ(c.chunks, 1);
  c = run_counted(fixed, 100, 1, 20.0);  // 2000 units: two participants
  EXPECT_GT(c.chunks, 1);
  EXPECT_LE(c.threads, 2u);
  c = run_counted(fixed, 100, 1, 1e6);  // capped at the thread count
  EXPECT_LE(c.threads, 4u);
  // The default split of each wait mode.
  ThreadPool spin(2, ThreadPool::kAutoSplit, ThreadPool::Wait::Spin);
  EXPECT_EQ(spin.min_work_per_thread(), ThreadPool::kSpinMinWork);
  ThreadPool sleep(2, ThreadPool::kAutoSplit, ThreadPool::Wait::Sleep);
  EXPECT_EQ(sleep.min_work_per_thread(), ThreadPool::kSleepMinWork);
}

}  // namespace
}  // namespace drama::test

#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <string>

#include "backend/backend.h"
#include "util/error.h"
#include "util/stack_or_heap.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace drama::cpu {

namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until ready() or limit_ns pass; returns ready()'s last value. After the first
// kPauseOnlyNs it also yields between polls, so that on a machine with more runnable threads than
// cores the thread being waited for can run.
constexpr int64_t kPauseOnlyNs = 5'000;

template <typename Ready>
bool spin_until(Ready ready, int64_t limit_ns) {
  if (ready()) return true;
  if (limit_ns <= 0) return false;
  const auto t0 = Clock::now();
  bool yielding = false;
  for (int i = 1;; ++i) {
    if (yielding)
      std::this_thread::yield();
    else
      cpu_relax();
    if (ready()) return true;
    if (yielding || (i & 15) == 0) {
      const int64_t ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      if (ns > limit_ns) return ready();
      yielding = ns > kPauseOnlyNs;
    }
  }
}

ThreadPool::Wait resolve_wait(ThreadPool::Wait wait, int threads) {
  if (wait != ThreadPool::Wait::Auto) return wait;
  const char* forced = std::getenv("DRAMA_CPU_WAIT");
  if (forced && *forced) {
    const std::string v = forced;
    if (v == "spin") return ThreadPool::Wait::Spin;
    if (v == "sleep") return ThreadPool::Wait::Sleep;
    if (v != "auto") throw Error("DRAMA_CPU_WAIT must be spin, sleep or auto, not '" + v + "'.");
  }
  return threads <= available_cores() ? ThreadPool::Wait::Spin : ThreadPool::Wait::Sleep;
}

}  // namespace

ThreadPool::ThreadPool(int threads, double min_work_per_thread, Wait wait,
                       void (*on_worker_start)())
    : threads_(std::max(1, threads)),
      on_worker_start_(on_worker_start),
      wait_(resolve_wait(wait, threads_)),
      min_work_(min_work_per_thread),
      spin_ns_(wait_ == Wait::Spin ? kSpinNs : 0),
      mail_(new Mailbox[static_cast<size_t>(threads_)]) {
  if (min_work_ < 0) min_work_ = wait_ == Wait::Spin ? kSpinMinWork : kSleepMinWork;
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
  // Every worker has run its start hook before the pool is used: a thread that started late
  // (a busy machine) would otherwise size its scratch during the first calls.
  if (on_worker_start_)
    while (started_.load(std::memory_order_acquire) < threads_ - 1) std::this_thread::yield();
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  for (int i = 1; i < threads_; ++i) post(mail_[i]);
  wake_sleepers(threads_);
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const Range& fn) {
  run(n, grain, threads_, fn);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, double work_per_item, const Range& fn) {
  const double work = static_cast<double>(std::max<int64_t>(n, 0)) * work_per_item;
  const double parts = min_work_ > 0 ? std::floor(work / min_work_) : double(threads_);
  run(n, grain, parts < 1 ? 1 : parts > threads_ ? threads_ : static_cast<int64_t>(parts), fn);
}

uint32_t ThreadPool::post(Mailbox& m) {
  const uint32_t sequence = ++m.posted;
  m.start.store(sequence, std::memory_order_release);
  return sequence;
}

void ThreadPool::wake_sleepers(int64_t parts) {
  // Against the worker's store of worker_sleeping, fence, load of start: either the worker sees
  // its chunk before it sleeps, or we see it asleep. One fence for all the chunks posted.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int64_t i = 1; i < parts; ++i)
    if (mail_[i].worker_sleeping.load(std::memory_order_relaxed)) mail_[i].start.notify_one();
}

void ThreadPool::wait_done(Mailbox& m, uint32_t sequence) {
  if (spin_until([&] { return m.done.load(std::memory_order_acquire) == sequence; }, spin_ns_))
    return;
  m.caller_sleeping.store(true);
  for (uint32_t seen; (seen = m.done.load()) != sequence;) m.done.wait(seen);
  m.caller_sleeping.store(false, std::memory_order_relaxed);
}

void ThreadPool::run(int64_t n, int64_t grain, int64_t max_parts, const Range& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t grains = (n + grain - 1) / grain;
  int64_t parts = std::min<int64_t>({threads_, grains, std::max<int64_t>(1, max_parts)});
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  // Chunks are claimed from a shared counter, several per participant on small pools: a thread
  // that is preempted (a busy VM) or slow to wake leaves its share to the others instead of
  // holding up the call. Which thread computes a chunk never changes a value.
  const int64_t per_part = parts <= 4 ? 4 : 2;
  const int64_t chunk_grains = std::max<int64_t>(1, grains / (parts * per_part));
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk_grains * grain;
  chunks_ = (n + chunk_ - 1) / chunk_;
  parts = std::min(parts, chunks_);
  next_chunk_.store(0, std::memory_order_relaxed);
  StackOrHeap<uint32_t, kMaxStackParts> seq(static_cast<size_t>(parts));
  for (int64_t i = 1; i < parts; ++i) seq[i] = post(mail_[i]);
  wake_sleepers(parts);
  std::exception_ptr error;
  try {
    run_chunks();
  } catch (...) {
    error = std::current_exception();
    next_chunk_.store(chunks_, std::memory_order_relaxed);  // the others stop taking chunks
  }
  // A worker that has not claimed its call yet never will: the caller takes the claim back and
  // does not wait for it. One that has is waited for.
  for (int64_t i = 1; i < parts; ++i) {
    uint32_t expected = seq[i] - 1;
    if (!mail_[i].claimed.compare_exchange_strong(expected, seq[i], std::memory_order_acq_rel))
      wait_done(mail_[i], seq[i]);
  }
  fn_ = nullptr;
  if (error) std::rethrow_exception(error);
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    (*fn_)(c * chunk_, std::min(n_, (c + 1) * chunk_));
  }
}

void ThreadPool::worker(int index) {
  if (on_worker_start_) on_worker_start_();
  started_.fetch_add(1, std::memory_order_release);
  Mailbox& m = mail_[index];
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    if (!spin_until([&] { return (g = m.start.load(std::memory_order_acquire)) != seen; },
                    spin_ns_)) {
      m.worker_sleeping.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);  // see wake_sleepers
      while ((g = m.start.load(std::memory_order_acquire)) == seen)
        m.start.wait(seen, std::memory_order_acquire);
      m.worker_sleeping.store(false, std::memory_order_relaxed);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    // Claim the call; failing means the caller finished without us and took it back.
    uint32_t expected = g - 1;
    if (!m.claimed.compare_exchange_strong(expected, g, std::memory_order_acq_rel)) continue;
    run_chunks();
    m.done.store(g);
    if (m.caller_sleeping.load()) m.done.notify_one();
  }
}

}  // namespace drama::cpu

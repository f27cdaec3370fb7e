#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include "backend/backend.h"
#include "util/error.h"

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

ThreadPool::ThreadPool(int threads, double min_work_per_thread, Wait wait)
    : threads_(std::max(1, threads)),
      wait_(resolve_wait(wait, threads_)),
      min_work_(min_work_per_thread),
      spin_ns_(wait_ == Wait::Spin ? kSpinNs : 0),
      mail_(new Mailbox[static_cast<size_t>(threads_)]) {
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
  if (min_work_ < 0) calibrate();
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  for (int i = 1; i < threads_; ++i) post(mail_[i]);
  for (auto& t : workers_) t.join();
}

void ThreadPool::calibrate() {
  if (wait_ == Wait::Sleep || threads_ == 1) {
    min_work_ = kSleepMinWork;
    return;
  }
  // Once per process and thread count: tests build many backends.
  static std::mutex mutex;
  static std::map<int, double> measured;
  std::lock_guard lock(mutex);
  auto it = measured.find(threads_);
  if (it == measured.end()) {
    const Range empty = [](int64_t, int64_t) {};
    std::vector<double> t;
    for (int rep = 0; rep < 40; ++rep) {
      const auto t0 = Clock::now();
      run(threads_, 1, threads_, empty);
      if (rep >= 8) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    it = measured.emplace(threads_, t[t.size() / 2]).first;
  }
  fork_join_s_ = it->second;
  min_work_ = std::clamp(kSplitFactor * fork_join_s_ * kBytesPerSecondPerThread, kSpinMinWorkFloor,
                         kSleepMinWork);
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
  // Sequentially consistent store then load, against the worker's store of worker_sleeping and
  // load of start: either the worker sees this chunk before it sleeps, or we see it asleep.
  const uint32_t sequence = ++m.posted;
  m.start.store(sequence);
  if (m.worker_sleeping.load()) m.start.notify_one();
  return sequence;
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
  const int64_t chunk = (grains + parts - 1) / parts * grain;
  parts = (n + chunk - 1) / chunk;  // rounding up the chunk can leave the last parts empty
  uint32_t sequence[kMaxStackParts];
  std::vector<uint32_t> more;
  uint32_t* seq = sequence;
  if (parts > kMaxStackParts) {
    more.resize(static_cast<size_t>(parts));
    seq = more.data();
  }
  for (int64_t i = 1; i < parts; ++i) {
    Mailbox& m = mail_[i];
    m.fn = &fn;
    m.begin = i * chunk;
    m.end = std::min(n, (i + 1) * chunk);
    seq[i] = post(m);
  }
  std::exception_ptr error;
  try {
    fn(0, std::min(n, chunk));
  } catch (...) {
    error = std::current_exception();
  }
  for (int64_t i = 1; i < parts; ++i) wait_done(mail_[i], seq[i]);
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker(int index) {
  Mailbox& m = mail_[index];
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    if (!spin_until([&] { return (g = m.start.load(std::memory_order_acquire)) != seen; },
                    spin_ns_)) {
      m.worker_sleeping.store(true);
      while ((g = m.start.load()) == seen) m.start.wait(seen);
      m.worker_sleeping.store(false, std::memory_order_relaxed);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*m.fn)(m.begin, m.end);
    m.done.store(g);
    if (m.caller_sleeping.load()) m.done.notify_one();
  }
}

}  // namespace drama::cpu

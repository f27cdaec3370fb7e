// A fixed set of worker threads that run one data-parallel loop at a time. Work is split into
// contiguous chunks whose size depends only on the loop and the number of participants; the
// participants (the caller and the workers it posts to) take chunks from a shared counter, so
// which thread computes an output never affects its value.
//
// Each worker has its own mailbox (one cache line): the caller posts the call into the mailboxes
// of the workers it needs, so a small loop wakes only the threads it uses. A worker claims the call
// when it wakes; once the caller has run out of chunks it takes back every claim not yet made and
// waits only for the workers that did claim, so a preempted or sleeping worker never holds a call
// up. How an idle thread waits is the pool's wait mode:
// - Spin: a worker spins (with pause) for kSpinNs after its last chunk before it sleeps on a
//   futex, and the caller spins for its workers' done marks; a fork/join then costs about a
//   microsecond instead of tens.
// - Sleep: workers and the caller sleep on a futex at once. On small VMs two vCPUs can share one
//   core, and a spinning thread steals the time the other needs.
// The default (auto) spins when the process's affinity mask holds at least as many cores as the
// pool has threads, and sleeps when the pool is oversubscribed; DRAMA_CPU_WAIT=spin|sleep forces
// one (docs/cpu-backend.md has the measurements).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace drama::cpu {

// A non-owning reference to a callable fn(begin, end). parallel_for calls it only before it
// returns, so the callable (usually a lambda in the call's own expression) outlives every use,
// and nothing is copied or allocated: a std::function of a capturing lambda allocated on every
// call, about 250 times a decode step of the tiny model (tests/model/test_step_heap.cpp).
class RangeFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& fn)  // NOLINT(google-explicit-constructor): lambdas convert at the call
      : target_(const_cast<void*>(static_cast<const void*>(std::addressof(fn)))),
        call_(&invoke<std::remove_reference_t<F>>) {}
  void operator()(int64_t begin, int64_t end) const { call_(target_, begin, end); }

 private:
  template <class F>
  static void invoke(void* target, int64_t begin, int64_t end) {
    (*static_cast<F*>(target))(begin, end);
  }
  void* target_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  enum class Wait { Auto, Spin, Sleep };
  // min_work_per_thread: see the work overload of parallel_for. kAutoSplit (the default) is
  // kSpinMinWork in spin mode and kSleepMinWork in sleep mode; 0 splits every loop as far as its
  // grain allows, which tests use to exercise the split.
  static constexpr double kAutoSplit = -1;
  // threads >= 1; 1 runs everything inline.
  // on_worker_start (optional) runs on each worker thread as it starts (the CPU backend sizes the
  // thread's kernel scratch there).
  explicit ThreadPool(int threads, double min_work_per_thread = kAutoSplit, Wait wait = Wait::Auto,
                      void (*on_worker_start)() = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }
  Wait wait_mode() const { return wait_; }  // Spin or Sleep (never Auto)
  double min_work_per_thread() const { return min_work_; }

  // Calls fn(begin, end) over [0, n) split into contiguous chunks whose sizes are multiples of
  // `grain` (except the last), run by at most threads() threads. Returns when every chunk is
  // done; an exception thrown on the caller's thread stops the handing out of chunks and is
  // rethrown once the workers are done. Calls from several host threads are serialised; fn must
  // not call parallel_for itself.
  using Range = RangeFn;
  void parallel_for(int64_t n, int64_t grain, const Range& fn);
  // The same, but uses a worker only for each min_work_per_thread units of work (work_per_item
  // units per item, about the bytes an item touches), so loops too small to repay a fork/join run
  // inline on the caller. The split never changes a result.
  void parallel_for(int64_t n, int64_t grain, double work_per_item, const Range& fn);

  // Sleep mode's split: waking a sleeping worker costs 28 us on the 2-vCPU VMs when calls come
  // back to back (measured: an empty two-thread parallel_for) and more after a longer sleep. With
  // 1 MiB the cpu-bench decode at 2 threads took 36.4 ms/frame, with 4 MiB 33.8, never splitting
  // 34.1-34.6 (and 1 thread 27.3).
  static constexpr double kSleepMinWork = 1 << 22;
  // Spin mode's split: a spinning worker started 0.24-0.27 us (median) after the post on the dev
  // VM, p90 0.4-0.9 us: about the time to stream 10 KiB. 16 KiB is what the dev VM decode
  // measurements used (docs/cpu-backend.md, "Threads"). A
  // threshold measured at start-up was tried and dropped: an empty call measures nothing (the
  // caller takes back the workers' claims before they look), and a call that waits for every
  // thread measured the scheduler's latency on a busy VM (1-4 ms), which would stop all splits.
  static constexpr double kSpinMinWork = 16 << 10;
  // How long an idle worker spins before it sleeps (spin mode).
  static constexpr int64_t kSpinNs = 200'000;

 private:
  struct alignas(64) Mailbox {
    std::atomic<uint32_t> start{0};    // sequence number of the last call posted to this worker
    std::atomic<uint32_t> claimed{0};  // the last call claimed, by the worker or taken back
    std::atomic<uint32_t> done{0};     // the last call the worker finished
    uint32_t posted = 0;               // the caller's copy of `start`
    std::atomic<bool> worker_sleeping{false};
    std::atomic<bool> caller_sleeping{false};
  };

  void worker(int index);
  void run_chunks();  // takes chunks of the current call until none are left
  void run(int64_t n, int64_t grain, int64_t max_parts, const Range& fn);
  uint32_t post(Mailbox& m);          // returns the chunk's sequence number
  void wake_sleepers(int64_t parts);  // after posting to mailboxes 1..parts-1
  void wait_done(Mailbox& m, uint32_t sequence);
  static constexpr int64_t kMaxStackParts = 64;

  int threads_;
  void (*on_worker_start_)();
  Wait wait_;
  double min_work_;
  int64_t spin_ns_;
  std::unique_ptr<Mailbox[]> mail_;  // [threads_]; index 0 unused (the caller)
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};  // workers past their start hook
  // The current call, written before its mailboxes are posted.
  const Range* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, chunks_ = 0;
  alignas(64) std::atomic<int64_t> next_chunk_{0};
};

}  // namespace drama::cpu

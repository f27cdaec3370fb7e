// A fixed set of worker threads that run one data-parallel loop at a time. Work is split into
// static contiguous chunks (one per thread, the caller taking the first), so which thread computes
// an output never affects its value. Waiting blocks on condition variables: on small VMs two
// vCPUs may share one core and spinning would steal the time the other thread needs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace drama::cpu {

class ThreadPool {
 public:
  // threads >= 1; 1 runs everything inline. min_work_per_thread: see the work overload of
  // parallel_for (0 splits every loop as far as its grain allows, which tests use to exercise the
  // split).
  explicit ThreadPool(int threads, double min_work_per_thread = kMinWorkPerThread);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end) over [0, n) split into at most threads() contiguous chunks whose sizes
  // are multiples of `grain` (except the last). Returns when every chunk is done. Calls from
  // several host threads are serialised.
  using Range = std::function<void(int64_t begin, int64_t end)>;
  void parallel_for(int64_t n, int64_t grain, const Range& fn);
  // The same, but uses a worker only for each min_work_per_thread (default kMinWorkPerThread)
  // units of work (work_per_item
  // units per item, about the bytes an item touches): waking a sleeping worker costs 28 us on the
  // 2-vCPU VMs when calls come back to back (measured: an empty two-thread parallel_for) and more
  // after a longer sleep, so smaller loops run inline on the caller. 4 MiB: with 1 MiB the
  // cpu-bench decode at 2 threads took 36.4 ms/frame, with 4 MiB 33.8, never splitting 34.1-34.6
  // (and 1 thread 27.3). The split never changes a result.
  static constexpr double kMinWorkPerThread = 1 << 22;
  void parallel_for(int64_t n, int64_t grain, double work_per_item, const Range& fn);

 private:
  void worker(int index);

  void run(int64_t n, int64_t grain, int64_t max_parts, const Range& fn);

  int threads_;
  double min_work_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  const Range* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
};

}  // namespace drama::cpu

#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace drama::cpu {

ThreadPool::ThreadPool(int threads, double min_work_per_thread)
    : threads_(std::max(1, threads)), min_work_(std::max(0.0, min_work_per_thread)) {
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
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

void ThreadPool::run(int64_t n, int64_t grain, int64_t max_parts, const Range& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t parts = std::min<int64_t>({threads_, grains, std::max<int64_t>(1, max_parts)});
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  const int64_t chunk = (grains + parts - 1) / parts * grain;
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    pending_ = threads_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0, std::min(n, chunk));
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const Range* fn;
    int64_t begin, end;
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      begin = std::min(n_, index * chunk_);
      end = std::min(n_, begin + chunk_);
    }
    if (begin < end) (*fn)(begin, end);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace drama::cpu

// Admission (interfaces.md, serving rules): one generation at a time; up to `max_queue` more
// requests wait in arrival order; beyond that a request is refused as busy. Shutdown wakes every
// waiter (refused) and raises the cancel flag that in-flight generation polls every frame.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace drama::server {

class Admission {
 public:
  explicit Admission(int max_queue) : max_queue_(max_queue) {}

  // Holding a Slot means the engine is ours; destroying it lets the next waiter in.
  class Slot {
   public:
    explicit Slot(Admission& a) : admission_(a) {}
    ~Slot() { admission_.release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    Admission& admission_;
  };

  // Waits for our turn. nullptr when the queue is full or the server is shutting down.
  std::unique_ptr<Slot> acquire();

  void shutdown();
  bool shutting_down() const { return shutdown_.load(); }
  const std::atomic<bool>& cancel_flag() const { return shutdown_; }

  int queue_depth() const;  // requests waiting, not counting the running one
  bool busy() const;        // a generation is running

 private:
  void release();

  const int max_queue_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool running_ = false;
  int waiting_ = 0;
  uint64_t next_ticket_ = 0;  // FIFO: tickets are served in the order they were taken
  uint64_t serving_ = 0;
  std::atomic<bool> shutdown_{false};
};

}  // namespace drama::server

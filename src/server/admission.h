// Admission (interfaces.md, serving rules): up to `lanes` generations at a time (they run together
// in the engine's batched step); up to `max_queue` more requests wait in arrival order; beyond
// that a request is refused as busy. Shutdown wakes every waiter (refused) and raises the cancel
// flag that in-flight generation polls every frame.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace drama::server {

class Admission {
 public:
  Admission(int lanes, int max_queue) : lanes_(lanes < 1 ? 1 : lanes), max_queue_(max_queue) {}

  // Holding a Lane means one of the engine's lanes is ours; destroying it lets the next waiter in.
  class Lane {
   public:
    explicit Lane(Admission& a) : admission_(a) {}
    ~Lane() { admission_.release(); }
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

   private:
    Admission& admission_;
  };

  // Waits for our turn. nullptr when the queue is full or the server is shutting down.
  std::unique_ptr<Lane> acquire();

  void shutdown();
  bool shutting_down() const { return shutdown_.load(); }
  const std::atomic<bool>& cancel_flag() const { return shutdown_; }

  int lanes() const { return lanes_; }
  int queue_depth() const;  // requests waiting, not counting the running ones
  int running() const;      // lanes in use
  bool busy() const { return running() > 0; }

 private:
  void release();

  const int lanes_, max_queue_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int running_ = 0;
  int waiting_ = 0;
  uint64_t next_ticket_ = 0;  // FIFO: tickets are served in the order they were taken
  uint64_t serving_ = 0;
  std::atomic<bool> shutdown_{false};
};

}  // namespace drama::server

// Continuous batching at frame boundaries (docs/model.md, "Sessions and lanes"): one thread owns
// the model and runs its batched step while any session is active; callers on their own threads
// submit a session and take its frames as they come. A caller that falls behind is held (the
// model computes at most one frame beyond the one it is taking) without slowing the others.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/drama3_model.h"

namespace drama {

struct SchedulerStats {
  int64_t lanes = 0;
  int64_t active = 0;   // sessions in the model now
  int64_t waiting = 0;  // submitted, not yet joined
  StepCounters steps;
};

class FrameScheduler {
 public:
  explicit FrameScheduler(Drama3Model& model);
  ~FrameScheduler();
  FrameScheduler(const FrameScheduler&) = delete;
  FrameScheduler& operator=(const FrameScheduler&) = delete;

  // Runs one session to its end, calling on_frame on the caller's thread for each frame as it is
  // made (return false to stop: the session is cancelled). Thread-safe; sessions beyond the
  // model's lanes wait, in order, for a lane. Throws what joining or generating threw.
  GenerationResult run(SessionSpec spec, const FrameCallback& on_frame);

  SchedulerStats stats() const;

 private:
  struct Ticket;
  void loop();

  Drama3Model& model_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Ticket>> waiting_;
  std::vector<std::shared_ptr<Ticket>> active_;
  StepCounters counters_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace drama

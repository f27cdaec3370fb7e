#include "engine/scheduler.h"

#include <algorithm>
#include <exception>

#include "util/error.h"

namespace drama {

struct FrameScheduler::Ticket {
  SessionSpec spec;
  uint64_t session = 0;
  struct Frame {
    int64_t index;
    std::vector<int32_t> codes;
  };
  std::deque<Frame> frames;  // made, not yet taken by the caller
  bool finished = false;
  bool consumer_stopped = false;  // the caller refused a frame or failed: cancel
  StopReason stop = StopReason::MaxFrames;
  std::exception_ptr error;
  std::condition_variable cv;
};

FrameScheduler::FrameScheduler(Drama3Model& model) : model_(model) {
  thread_ = std::thread([this] { loop(); });
}

FrameScheduler::~FrameScheduler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

SchedulerStats FrameScheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s;
  s.lanes = model_.capacity().lanes;
  s.active = static_cast<int64_t>(active_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.steps = counters_;
  return s;
}

GenerationResult FrameScheduler::run(SessionSpec spec, const FrameCallback& on_frame) {
  auto t = std::make_shared<Ticket>();
  t->spec = std::move(spec);
  std::unique_lock lock(mutex_);
  if (stop_) throw Error("the engine is shutting down");
  waiting_.push_back(t);
  work_cv_.notify_all();
  GenerationResult r;
  std::exception_ptr sink_error;
  for (;;) {
    t->cv.wait(lock, [&] { return !t->frames.empty() || t->finished; });
    if (t->frames.empty()) break;  // finished, every frame taken
    Ticket::Frame f = std::move(t->frames.front());
    t->frames.pop_front();
    work_cv_.notify_all();              // the session may advance again
    if (t->consumer_stopped) continue;  // made before the stop was seen: not delivered
    lock.unlock();
    r.codes.insert(r.codes.end(), f.codes.begin(), f.codes.end());
    ++r.frames;
    bool ok = true;
    try {
      ok = !on_frame || on_frame(f.index, f.codes);
    } catch (...) {
      sink_error = std::current_exception();
      ok = false;
    }
    lock.lock();
    if (!ok) {
      t->consumer_stopped = true;
      r.stop = StopReason::Cancelled;
      work_cv_.notify_all();
    }
  }
  if (sink_error) std::rethrow_exception(sink_error);
  if (t->error) std::rethrow_exception(t->error);
  if (!t->consumer_stopped) r.stop = t->stop;
  return r;
}

void FrameScheduler::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    auto runnable = [&] {
      if (!waiting_.empty() && model_.free_lanes() > 0) return true;
      for (const auto& t : active_)
        if (t->frames.empty() || t->consumer_stopped) return true;
      return false;
    };
    work_cv_.wait(lock, [&] { return stop_ || runnable(); });
    if (stop_) {
      for (auto* list : {&active_}) {
        for (auto& t : *list) {
          t->error = std::make_exception_ptr(Error("the engine is shutting down"));
          t->finished = true;
          t->cv.notify_all();
        }
        list->clear();
      }
      for (auto& t : waiting_) {
        t->error = std::make_exception_ptr(Error("the engine is shutting down"));
        t->finished = true;
        t->cv.notify_all();
      }
      waiting_.clear();
      return;
    }
    // Join at this frame boundary, in arrival order.
    while (!waiting_.empty() && model_.free_lanes() > 0) {
      std::shared_ptr<Ticket> t = waiting_.front();
      waiting_.pop_front();
      try {
        t->session = model_.join(std::move(t->spec));
        active_.push_back(t);
      } catch (...) {
        t->error = std::current_exception();
        t->finished = true;
        t->cv.notify_all();
      }
    }
    for (const auto& t : active_) {
      if (t->consumer_stopped) model_.cancel(t->session);
      // At most one frame beyond the one the caller is taking.
      model_.hold(t->session, !t->consumer_stopped && !t->frames.empty());
    }
    lock.unlock();
    std::vector<StepEvent> events;
    std::exception_ptr step_error;
    try {
      events = model_.step();
    } catch (...) {
      step_error = std::current_exception();
    }
    lock.lock();
    if (step_error) {
      // A failure of the step itself (not of one session): every active session gets it.
      for (auto& t : active_) {
        model_.cancel(t->session);
        t->error = step_error;
        t->finished = true;
        t->cv.notify_all();
      }
      active_.clear();
      lock.unlock();
      try {
        model_.step();  // ends the cancelled sessions, freeing their lanes
      } catch (...) {
      }
      lock.lock();
      continue;
    }
    counters_ = model_.counters();
    for (StepEvent& e : events) {
      auto it = std::find_if(active_.begin(), active_.end(),
                             [&](const auto& t) { return t->session == e.session; });
      if (it == active_.end()) continue;
      Ticket& t = **it;
      if (!e.finished) {
        t.frames.push_back({e.frame, std::move(e.codes)});
      } else {
        t.finished = true;
        t.stop = e.stop;
        if (!e.error.empty()) t.error = std::make_exception_ptr(Error(e.error));
        active_.erase(it);
      }
      t.cv.notify_all();
    }
  }
}

}  // namespace drama

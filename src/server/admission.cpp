#include "server/admission.h"

namespace drama::server {

std::unique_ptr<Admission::Slot> Admission::acquire() {
  std::unique_lock lock(mutex_);
  if (shutdown_) return nullptr;
  if (waiting_ + (running_ ? 1 : 0) > max_queue_)
    return nullptr;  // one running + max_queue waiting
  uint64_t ticket = next_ticket_++;
  ++waiting_;
  cv_.wait(lock, [&] { return shutdown_ || (!running_ && serving_ == ticket); });
  --waiting_;
  if (shutdown_) {
    // Pass the turn on so that later tickets are not stranded behind ours.
    if (serving_ == ticket) ++serving_;
    cv_.notify_all();
    return nullptr;
  }
  ++serving_;
  running_ = true;
  return std::make_unique<Slot>(*this);
}

void Admission::release() {
  std::lock_guard lock(mutex_);
  running_ = false;
  cv_.notify_all();
}

void Admission::shutdown() {
  std::lock_guard lock(mutex_);
  shutdown_ = true;
  cv_.notify_all();
}

int Admission::queue_depth() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

bool Admission::busy() const {
  std::lock_guard lock(mutex_);
  return running_;
}

}  // namespace drama::server

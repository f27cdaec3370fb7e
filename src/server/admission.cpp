#include "server/admission.h"

namespace drama::server {

std::unique_ptr<Admission::Lane> Admission::acquire() {
  std::unique_lock lock(mutex_);
  if (shutdown_) return nullptr;
  // A free lane, or a place among the max_queue waiters (a free lane with waiters ahead: they
  // are being woken and take it first).
  if (running_ >= lanes_ && waiting_ >= max_queue_) return nullptr;
  uint64_t ticket = next_ticket_++;
  ++waiting_;
  cv_.wait(lock, [&] { return shutdown_ || (running_ < lanes_ && serving_ == ticket); });
  --waiting_;
  if (shutdown_) {
    // Pass the turn on so that later tickets are not stranded behind ours.
    if (serving_ == ticket) ++serving_;
    cv_.notify_all();
    return nullptr;
  }
  ++serving_;
  ++running_;
  cv_.notify_all();  // the next ticket may take another free lane
  return std::make_unique<Lane>(*this);
}

void Admission::release() {
  std::lock_guard lock(mutex_);
  --running_;
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

int Admission::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

}  // namespace drama::server

// Key/value caches of one transformer for a fixed number of sequences (guidance branches),
// allocated once at load: per layer and kind one float32 array [slots * capacity, kv_dim], where
// position p of the sequence in slot s lives in row s * capacity + p. Attention reads a row's
// cache from its first row (cache_row0 = s * capacity), so any mix of sequences runs in one call.
// context() bounds every position (at least the capacity; more where a bench holds fewer
// positions than the server it stands for): attention takes it as its window, which then cuts
// nothing and tells a backend the longest span (CUDA sizes its launch by it).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace drama {

class KvPool {
 public:
  KvPool(Backend& backend, int64_t layers, int64_t slots, int64_t capacity, int64_t kv_dim,
         int64_t context = 0);
  float* k(int64_t layer) { return base_ + (2 * layer) * rows() * kv_dim_; }
  float* v(int64_t layer) { return base_ + (2 * layer + 1) * rows() * kv_dim_; }
  int64_t slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  int64_t context() const { return context_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t row0(int64_t slot) const { return slot * capacity_; }

 private:
  int64_t rows() const { return slots_ * capacity_; }
  std::unique_ptr<DeviceBuffer> buffer_;
  float* base_ = nullptr;
  int64_t slots_, capacity_, kv_dim_, context_;
};

}  // namespace drama

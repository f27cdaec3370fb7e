// Key/value cache of one sequence (one guidance branch) for every layer of one transformer,
// float32 [capacity, kv_heads, head_dim] per layer and kind; position p lives in row p.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace drama {

class KvCache {
 public:
  KvCache(Backend& backend, int64_t layers, int64_t capacity, int64_t kv_dim);
  float* k(int64_t layer) { return base_ + (2 * layer) * capacity_ * kv_dim_; }
  float* v(int64_t layer) { return base_ + (2 * layer + 1) * capacity_ * kv_dim_; }
  int64_t capacity() const { return capacity_; }
  int64_t kv_dim() const { return kv_dim_; }

 private:
  std::unique_ptr<DeviceBuffer> buffer_;
  float* base_ = nullptr;
  int64_t capacity_, kv_dim_;
};

}  // namespace drama

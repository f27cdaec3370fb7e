#include "model/kv_cache.h"

#include "util/error.h"

namespace drama {

KvCache::KvCache(Backend& backend, int64_t layers, int64_t capacity, int64_t kv_dim)
    : capacity_(capacity), kv_dim_(kv_dim) {
  if (layers <= 0 || capacity <= 0 || kv_dim <= 0)
    throw Error("KV cache: layers, capacity and kv_dim must be positive");
  const size_t bytes = static_cast<size_t>(2 * layers * capacity * kv_dim) * sizeof(float);
  buffer_ = backend.alloc(bytes);
  base_ = buffer_->f32();
}

}  // namespace drama

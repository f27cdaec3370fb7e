#include "model/kv_pool.h"

#include "util/error.h"

namespace drama {

KvPool::KvPool(Backend& backend, int64_t layers, int64_t slots, int64_t capacity, int64_t kv_dim,
               int64_t context)
    : slots_(slots),
      capacity_(capacity),
      kv_dim_(kv_dim),
      context_(context > capacity ? context : capacity) {
  if (layers <= 0 || slots <= 0 || capacity <= 0 || kv_dim <= 0)
    throw Error("KV pool: layers, slots, capacity and kv_dim must be positive");
  if (slots * capacity > (int64_t{1} << 31) - 1)
    throw Error("KV pool: " + std::to_string(slots) + " sequences of " + std::to_string(capacity) +
                " positions exceed 2^31 cache rows");
  const size_t bytes = static_cast<size_t>(2 * layers * slots * capacity * kv_dim) * sizeof(float);
  buffer_ = backend.alloc(bytes);
  base_ = buffer_->f32();
}

}  // namespace drama

#include "model/exec.h"

#include <algorithm>

namespace drama {

uint64_t weight_bytes(const LinearWeight& w) {
  const uint64_t n = static_cast<uint64_t>(w.out) * static_cast<uint64_t>(w.in);
  if (w.format == WeightFormat::NVFP4) return n / 2 + n / 16 + 4;
  return n * 2;
}

Exec::Exec(Backend& backend) : backend_(backend), slots_(static_cast<size_t>(Slot::kCount)) {}

void* Exec::slot_bytes(Slot slot, size_t bytes) {
  auto& buf = slots_[static_cast<size_t>(slot)];
  bytes = std::max<size_t>(bytes, 64);
  if (!buf || buf->bytes() < bytes) buf = backend_.alloc(bytes + bytes / 2);
  return buf->data();
}

float* Exec::f32(Slot slot, size_t count) {
  return static_cast<float*>(slot_bytes(slot, count * sizeof(float)));
}

int32_t* Exec::i32(Slot slot, size_t count) {
  return static_cast<int32_t*>(slot_bytes(slot, count * sizeof(int32_t)));
}

int32_t* Exec::upload_i32(Slot slot, std::span<const int32_t> values) {
  int32_t* p = i32(slot, values.size());
  if (!values.empty()) backend_.upload(p, values.data(), values.size_bytes());
  return p;
}

void Exec::linear(const LinearWeight& w, const float* x, int64_t rows, float* y) {
  traffic.bytes += weight_bytes(w);
  traffic.calls += 1;
  backend_.linear(w, x, rows, y);
}

void Exec::copy_rows(const float* src, int64_t rows, int64_t dim, float* dst) {
  if (rows <= 0) return;
  if (static_cast<size_t>(dim) > ones_count_) {
    ones_count_ = static_cast<size_t>(dim);
    ones_ = backend_.alloc(ones_count_ * sizeof(float));
    std::vector<float> ones(ones_count_, 1.0f);
    backend_.upload(ones_->data(), ones.data(), ones_count_ * sizeof(float));
  }
  backend_.scale_rows(src, ones_->f32(), rows, dim, dst);
}

void Exec::zero(float* dst, size_t count) {
  if (zeros_.size() < count) zeros_.assign(count, 0.0f);
  backend_.upload(dst, zeros_.data(), count * sizeof(float));
}

}  // namespace drama

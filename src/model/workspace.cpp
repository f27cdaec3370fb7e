#include "model/workspace.h"

#include <algorithm>

namespace drama {

Workspace::Workspace(Backend& backend)
    : backend_(backend), buffers_(static_cast<size_t>(Buf::kCount)) {}

void* Workspace::buffer_bytes(Buf buf, size_t bytes) {
  auto& b = buffers_[static_cast<size_t>(buf)];
  bytes = std::max<size_t>(bytes, 64);
  if (!b || b->bytes() < bytes) {
    // A buffer that moves invalidates captured steps that name its old address (they would
    // replay into freed memory): the engine reserves every buffer at load, so this is for
    // callers that grow one later (tests, benches).
    if (b) forget_captured();
    b = backend_.alloc(bytes + bytes / 2);
  }
  return b->data();
}

void Workspace::reserve(Buf buf, size_t bytes) {
  buffer_bytes(buf, bytes);
}

float* Workspace::f32(Buf buf, size_t count) {
  return static_cast<float*>(buffer_bytes(buf, count * sizeof(float)));
}

int32_t* Workspace::i32(Buf buf, size_t count) {
  return static_cast<int32_t*>(buffer_bytes(buf, count * sizeof(int32_t)));
}

int32_t* Workspace::upload_i32(Buf buf, std::span<const int32_t> values) {
  int32_t* p = i32(buf, values.size());
  if (!values.empty()) backend_.upload(p, values.data(), values.size_bytes());
  return p;
}

void Workspace::linear(const LinearWeight& w, const float* x, int64_t rows, float* y) {
  traffic.bytes += weight_bytes(w);
  traffic.calls += 1;
  backend_.linear(w, x, rows, y);
}

void Workspace::linear_add(const LinearWeight& w, const float* x, int64_t rows, float* scratch,
                           float* y) {
  traffic.bytes += weight_bytes(w);
  traffic.calls += 1;
  backend_.linear_add(w, x, rows, scratch, y);
}

void Workspace::linears(std::initializer_list<Backend::Product> products, const float* x,
                        int64_t rows) {
  for (const Backend::Product& p : products) {
    traffic.bytes += weight_bytes(*p.w);
    traffic.calls += 1;
  }
  backend_.linears(products.begin(), static_cast<int64_t>(products.size()), x, rows);
}

uint64_t Workspace::weight_bytes_read() const {
  return traffic.bytes + backend_.transfers().expert_weight_bytes;
}

bool Workspace::run_captured(const std::string& key, const std::function<void()>& work) {
  const WeightTraffic t0 = traffic;
  WeightTraffic& first = captured_[key];
  if (backend_.run_captured(key, work)) {
    traffic.bytes += first.bytes;
    traffic.calls += first.calls;
    return true;
  }
  first = {traffic.bytes - t0.bytes, traffic.calls - t0.calls};
  return false;
}

void Workspace::forget_captured() {
  captured_.clear();
  backend_.forget_captured();
}

void Workspace::copy_rows(const float* src, int64_t rows, int64_t dim, float* dst) {
  if (rows > 0) backend_.copy_2d(dst, dim, src, dim, 1, rows, dim);
}

void Workspace::zero(float* dst, size_t count) {
  if (count > 0)
    backend_.fill(dst, static_cast<int64_t>(count), 1, static_cast<int64_t>(count), 0.0f);
}

}  // namespace drama

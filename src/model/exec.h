// What every piece of the model needs to run kernels: the backend, grow-on-demand scratch
// buffers, a row copy built from backend kernels, and counters of weight traffic (for benches).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace drama {

// Scratch slots. A function uses only its own slots, so callers' buffers stay valid.
enum class Slot : int {
  kPositions,
  kIds,
  kNormed,
  kQ,
  kK,
  kV,
  kAttnOut,
  kProj,  // attention
  kGate,
  kUp,
  kAct,
  kMlpOut,  // dense MLP
  kRouterLogits,
  kExpertIndex,
  kExpertWeight,
  kExpertOut,  // MoE
  kGatherIn,
  kGatherGate,
  kGatherUp,
  kGatherAct,
  kGatherOut,
  kSharedGate,
  kCombineWeight,
  kCount
};

struct WeightTraffic {
  uint64_t bytes = 0;  // weight bytes read by linear calls (each call reads its weight once)
  uint64_t calls = 0;
};

uint64_t weight_bytes(const LinearWeight& w);

class Exec {
 public:
  explicit Exec(Backend& backend);
  Backend& backend() { return backend_; }

  float* f32(Slot slot, size_t count);
  int32_t* i32(Slot slot, size_t count);
  // Uploads host ints into a slot and returns the device pointer.
  int32_t* upload_i32(Slot slot, std::span<const int32_t> values);

  // Every matrix product goes through here so weight traffic is counted.
  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y);
  // dst = src (rows x dim, both contiguous), exactly: x * 1.0f through scale_rows, because the
  // backend has no device-to-device copy and x * 1 is exact for every float.
  void copy_rows(const float* src, int64_t rows, int64_t dim, float* dst);
  void zero(float* dst, size_t count);

  WeightTraffic traffic;

 private:
  void* slot_bytes(Slot slot, size_t bytes);
  Backend& backend_;
  std::vector<std::unique_ptr<DeviceBuffer>> slots_;
  std::unique_ptr<DeviceBuffer> ones_;
  size_t ones_count_ = 0;
  std::vector<float> zeros_;
};

}  // namespace drama

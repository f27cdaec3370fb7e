// What every piece of the model needs to run kernels: the backend, named scratch buffers that are
// reserved at load for the largest step (so a request allocates nothing and no buffer moves), and
// the count of weight bytes the products read (for benches).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace drama {

// Scratch buffers of the model. A function uses only its own, so callers' buffers stay valid.
enum class Buf : int {
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
  kMlpOut,  // dense MLP (and the shared expert)
  kRouterLogits,
  kExpertIndex,
  kExpertWeight,
  kExpertOut,
  kMoeWorkspace,
  kSharedOut,
  kSharedGate,
  kCombineWeight,  // MoE
  kEmbedded,
  kHeadRows,  // tower inputs and head rows
  kCount
};

struct WeightTraffic {
  uint64_t bytes = 0;  // weight bytes read by linear calls (each call reads its weight once)
  uint64_t calls = 0;
};

class Workspace {
 public:
  explicit Workspace(Backend& backend);
  Backend& backend() { return backend_; }

  // A buffer of at least `count` elements. It grows (a new allocation) only past what reserve()
  // or an earlier call asked for; the frame step never makes it grow (tests count allocations).
  float* f32(Buf buf, size_t count);
  int32_t* i32(Buf buf, size_t count);
  void reserve(Buf buf, size_t bytes);
  // Uploads host ints into a buffer and returns the device pointer.
  int32_t* upload_i32(Buf buf, std::span<const int32_t> values);

  // Every dense product goes through here so weight traffic is counted (the experts' products run
  // inside the backend's moe_experts, which counts its own: weight_bytes_read() adds both).
  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y);
  // Products of one input in one backend call (Backend::linears), counted as as many linear calls.
  void linears(std::initializer_list<Backend::Product> products, const float* x, int64_t rows);
  // y += linear(w, x) (Backend::linear_add; scratch as it says), counted as a linear call.
  void linear_add(const LinearWeight& w, const float* x, int64_t rows, float* scratch, float* y);
  uint64_t weight_bytes_read() const;
  // backend().run_captured(key, work), a replay counting the linear traffic its key's first run
  // counted (a function of the shapes, so exact). The expert bytes a backend counts depend on the
  // experts the rows chose, which a replay does not see on the host: a replay adds none (CUDA
  // counts none at all). forget_captured() drops the memo and the backend's captured work.
  bool run_captured(const std::string& key, const std::function<void()>& work);
  void forget_captured();
  // dst = src (rows x dim, both contiguous).
  void copy_rows(const float* src, int64_t rows, int64_t dim, float* dst);
  void zero(float* dst, size_t count);

  WeightTraffic traffic;

 private:
  void* buffer_bytes(Buf buf, size_t bytes);
  Backend& backend_;
  std::map<std::string, WeightTraffic> captured_;  // per key, what its first run counted
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

}  // namespace drama

#include "backend/backend.h"

#include <sched.h>

#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "util/error.h"

namespace drama {

#ifdef DRAMA_WITH_CUDA
// Provided by src/backend/cuda/ when the CUDA backend is built.
bool cuda_device_present();
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
#endif

uint64_t weight_bytes(const LinearWeight& w) {
  const uint64_t n = static_cast<uint64_t>(w.out) * static_cast<uint64_t>(w.in);
  if (w.format == WeightFormat::NVFP4) return n / 2 + n / 16 + 4;
  return n * 2;
}

const std::vector<std::string>& Backend::kernel_names() {
  static const std::vector<std::string> names = {"copy_2d",
                                                 "fill",
                                                 "copy_rows",
                                                 "gather_ids",
                                                 "linear",
                                                 "linears",
                                                 "linear_add",
                                                 "dequantize",
                                                 "embed_sum",
                                                 "rms_norm",
                                                 "rope",
                                                 "qk_norm_rope_cache",
                                                 "attention",
                                                 "swiglu",
                                                 "add",
                                                 "sigmoid",
                                                 "route_topk",
                                                 "moe_experts",
                                                 "expert_combine",
                                                 "expert_sum",
                                                 "expert_sum_add",
                                                 "expert_sum_add_norm",
                                                 "guidance_combine",
                                                 "sample_rows",
                                                 "conv1d",
                                                 "conv_transpose1d",
                                                 "elu",
                                                 "gelu",
                                                 "layer_norm",
                                                 "scale_rows",
                                                 "vq_decode",
                                                 "vq_encode"};
  return names;
}

int64_t Backend::moe_workspace_floats(int64_t rows, int64_t k, int64_t hidden, int64_t inter,
                                      int64_t n_stored) {
  // Gathered inputs and outputs [rows * k, hidden], gate / up / activation [rows * k, inter],
  // and room for a device-side grouping (pair order, per-expert offsets, chosen experts) in
  // 32-bit words with some alignment (CUDA's layout, moe_layout_floats, fits inside).
  const int64_t pairs = rows * k;
  return pairs * (2 * hidden + 3 * inter) + 2 * pairs + 2 * n_stored + 9;
}

void Backend::linears(const Product* products, int64_t n, const float* x, int64_t rows) {
  for (int64_t j = 0; j < n; ++j) linear(*products[j].w, x, rows, products[j].y);
}

void Backend::linear_add(const LinearWeight& w, const float* x, int64_t rows, float* scratch,
                         float* y) {
  linear(w, x, rows, scratch);
  add(scratch, rows * w.out, y);
}

void Backend::qk_norm_rope_cache(float* q, float* k, const float* v, int64_t rows, int64_t heads,
                                 int64_t kv_heads, int64_t head_dim, const uint16_t* q_norm,
                                 const uint16_t* k_norm, float eps, const int32_t* positions,
                                 float theta, const int32_t* kv_row, float* k_cache,
                                 float* v_cache) {
  rms_norm(q, q_norm, rows * heads, head_dim, eps, q);
  rms_norm(k, k_norm, rows * kv_heads, head_dim, eps, k);
  rope(q, rows, heads, head_dim, positions, theta);
  rope(k, rows, kv_heads, head_dim, positions, theta);
  copy_rows(k, nullptr, k_cache, kv_row, rows, kv_heads * head_dim);
  copy_rows(v, nullptr, v_cache, kv_row, rows, kv_heads * head_dim);
}

void Backend::expert_sum(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                         int64_t dim, float* y) {
  fill(y, dim, rows, dim, 0.0f);
  expert_combine(expert_out, weight, rows, k, dim, y);
}

void Backend::expert_sum_add(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                             int64_t dim, float* scratch, float* y) {
  expert_sum(expert_out, weight, rows, k, dim, scratch);
  add(scratch, rows * dim, y);
}

void Backend::expert_sum_add_norm(const float* expert_out, const float* weight, int64_t rows,
                                  int64_t k, int64_t dim, float* scratch, float* y,
                                  const uint16_t* norm_w, float eps, float* yn) {
  expert_sum_add(expert_out, weight, rows, k, dim, scratch, y);
  rms_norm(y, norm_w, rows, dim, eps, yn);
}

namespace {
// The backend whose run_captured is running on this thread (nullptr: none).
thread_local const Backend* t_inside_captured = nullptr;
}  // namespace

void Backend::refuse_inside_captured(const char* what) const {
  if (t_inside_captured == this)
    throw Error(std::string("internal: ") + what +
                " inside captured work (a captured sequence would replay it with stale data)");
}

bool Backend::run_captured(const std::string& key, const std::function<void()>& work) {
  if (t_inside_captured) throw Error("internal: run_captured inside captured work");
  t_inside_captured = this;
  bool replayed = false;
  try {
    replayed = run_captured_impl(key, work);
  } catch (...) {
    t_inside_captured = nullptr;
    throw;
  }
  t_inside_captured = nullptr;
  return replayed;
}

std::unique_ptr<DeviceBuffer> Backend::alloc(size_t bytes) {
  refuse_inside_captured("an allocation");
  allocs_.fetch_add(1, std::memory_order_relaxed);
  alloc_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return alloc_impl(bytes);
}

void Backend::upload(void* dst, const void* src, size_t bytes) {
  refuse_inside_captured("an upload");
  h2d_calls_.fetch_add(1, std::memory_order_relaxed);
  h2d_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  upload_impl(dst, src, bytes);
}

void Backend::download(void* dst, const void* src, size_t bytes) {
  refuse_inside_captured("a download");
  d2h_calls_.fetch_add(1, std::memory_order_relaxed);
  d2h_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  download_impl(dst, src, bytes);
}

TransferCounters Backend::transfers() const {
  TransferCounters t;
  t.h2d_calls = h2d_calls_.load(std::memory_order_relaxed);
  t.h2d_bytes = h2d_bytes_.load(std::memory_order_relaxed);
  t.d2h_calls = d2h_calls_.load(std::memory_order_relaxed);
  t.d2h_bytes = d2h_bytes_.load(std::memory_order_relaxed);
  t.allocs = allocs_.load(std::memory_order_relaxed);
  t.alloc_bytes = alloc_bytes_.load(std::memory_order_relaxed);
  t.expert_weight_bytes = expert_weight_bytes_.load(std::memory_order_relaxed);
  return t;
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.threads < 0)
    throw UsageError("--threads must be 0 (all cores) or positive, not " +
                     std::to_string(options.threads) + ".");
  const std::string& kind = options.kind;
  if (kind != "auto" && kind != "cpu" && kind != "cuda")
    throw UsageError("--backend must be auto, cpu or cuda, not '" + kind + "'.");
#ifdef DRAMA_WITH_CUDA
  if (kind == "cuda" || (kind == "auto" && cuda_device_present()))
    return make_cuda_backend(options);
#else
  if (kind == "cuda") throw Error("drama was built without the CUDA backend (--backend cuda).");
#endif
  const int threads = options.threads > 0 ? options.threads : available_cores();
  if (options.min_split_work >= 0)
    return std::make_unique<cpu::CpuBackend>(threads, cpu::select_isa(), options.min_split_work);
  return std::make_unique<cpu::CpuBackend>(threads, cpu::select_isa());
}

}  // namespace drama

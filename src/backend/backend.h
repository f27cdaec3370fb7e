// The backend boundary: device buffers, weights resident on a device, and the kernel set the
// model and codec call in order (no graph IR). Every backend (cpu/, cuda/) implements this class.
//
// Conventions for every kernel:
// - Activations are float32, row-major; a "row" is one token position or one batch member.
// - Pointers are device pointers from this backend's buffers (on the CPU: host memory).
// - Batch invariance: row r of a call with n rows is bitwise equal to the same call on row r
//   alone, and results never depend on the thread count. Each output element is reduced in one
//   fixed order.
// - Kernels validate nothing the model already validated at load; shapes are trusted.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace drama {

// A weight matrix [out, in] as stored in the checkpoint (spec section 4). `in` is the reduction
// length. BF16: data = bf16 [out, in]. NVFP4: data = packed E2M1 codes [out, in/2] (element 2j in
// the low nibble), scales = e4m3 [out, in/16], scale2 = the per-tensor float32 scale.
enum class WeightFormat : uint8_t { BF16, NVFP4 };

struct LinearWeight {
  WeightFormat format = WeightFormat::BF16;
  int64_t out = 0, in = 0;
  const void* data = nullptr;
  const uint8_t* scales = nullptr;
  float scale2 = 1.0f;
};

// Bytes a product reads of its weight (codes, block scales and the global scale for NVFP4).
uint64_t weight_bytes(const LinearWeight& w);

struct SamplingParams {
  float temperature = 0.9f;  // 0 = greedy argmax (lowest id on ties)
  int32_t top_k = 50;        // 0 = no top-k
  float top_p = 1.0f;        // 1 = no top-p
};

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  float* f32() { return static_cast<float*>(data()); }
};

// Transfers and allocations since construction (or the last reset), counted by Backend itself so
// that every backend reports them the same way. Tests read them (one device-to-host read per
// frame step, no allocation after load); `drama bench decode` reports them per step.
struct TransferCounters {
  uint64_t h2d_calls = 0, h2d_bytes = 0;  // upload
  uint64_t d2h_calls = 0, d2h_bytes = 0;  // download
  uint64_t allocs = 0, alloc_bytes = 0;   // alloc
  // Weight bytes read by moe_experts (the experts it ran), which the model cannot count itself:
  // the expert choice stays on the device. A backend that does not count reports 0.
  uint64_t expert_weight_bytes = 0;
};

// One row of a batched sampling call (device memory): the session's sampling parameters and the
// counter-based generator's key (seed, frame); the codebook is the call's.
struct SampleRow {
  float temperature = 0.9f;  // 0 = greedy argmax (lowest id on ties)
  int32_t top_k = 50;        // 0 = no top-k
  float top_p = 1.0f;        // 1 = no top-p
  int32_t pad = 0;
  uint64_t seed = 0;
  uint64_t frame = 0;
};

// One output row of a batched guidance combine (device memory): out = logits[cond_row] when
// uncond_row < 0, else logits[u] + gamma * (logits[c] - logits[u]) in float32 (spec section 6).
struct GuidanceRow {
  int32_t cond_row = 0;
  int32_t uncond_row = -1;
  float gamma = 1.0f;
};

// One stored expert of a MoE layer: SwiGLU MLP weights, all of one intermediate size.
struct ExpertWeights {
  LinearWeight gate, up, down;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (avx512, 2 threads)"
  // The kernels of this interface a backend implements (kernel_names() lists them all); a
  // harness reports the others as "not supported" instead of failing.
  virtual bool supports(const std::string& kernel) const = 0;
  static const std::vector<std::string>& kernel_names();

  // --- memory (counted here, done by the *_impl methods) ---
  std::unique_ptr<DeviceBuffer> alloc(size_t bytes);
  void upload(void* dst, const void* src, size_t bytes);
  void download(void* dst, const void* src, size_t bytes);
  TransferCounters transfers() const;
  // Makes a weight resident. `host` points into the mapped checkpoint; the CPU returns a view of
  // it (zero copy), a GPU copies it to device memory owned by the backend.
  virtual LinearWeight resident(const LinearWeight& host) = 0;
  virtual const void* resident_bytes(const void* host, size_t bytes) = 0;
  // Makes what moe_experts needs of a layer's experts before any step (the CUDA backend's device
  // table of expert pointers, an upload: captured work may not make it). At load, once per layer.
  virtual void prepare_experts(const ExpertWeights* /*experts*/, int64_t /*n_stored*/) {}
  virtual void synchronize() = 0;

  // --- captured work (on CUDA a graph; docs/cuda-backend.md, "The frame step as one graph") ---
  // Runs `work`: kernel calls on this backend whose launches and arguments are a function of
  // `key` alone (whatever differs between two runs of one key lies in device memory). A backend
  // that captures runs a key's first occurrence as it comes, captures the second and replays it
  // from then on; the CPU runs `work` every time. No upload, download or allocation may happen
  // inside `work` on the calling thread: on every backend that is an internal error, so the
  // CPU's tests catch what a capture would bake in. A replay runs nothing on the host, so it
  // counts nothing (Workspace::run_captured counts a replay as its key's first run). Returns
  // true when the call was a replay.
  bool run_captured(const std::string& key, const std::function<void()>& work);
  // Drops every captured sequence (after a change that the keys do not describe).
  virtual void forget_captured() {}

  // --- matrix products ---
  // y[r, o] = sum_i x[r, i] * w[o, i]   for r < rows; x is [rows, w.in], y is [rows, w.out].
  virtual void linear(const LinearWeight& w, const float* x, int64_t rows, float* y) = 0;
  // Several products of one input: y_j = linear(*w_j, x, rows) for j < n, bitwise what n linear
  // calls give on the same backend (the default makes them; a GPU makes the products of one input
  // width in one launch: attention's q, k and v, a dense MLP's gate and up).
  struct Product {
    const LinearWeight* w;
    float* y;
  };
  virtual void linears(const Product* products, int64_t n, const float* x, int64_t rows);
  // y += linear(w, x, rows) (a residual add after a product): bitwise linear into `scratch`
  // ([rows, w.out]) then add(scratch, rows * w.out, y) on the same backend (the default makes
  // those two calls). A backend may fold the add into the product's launch and leave scratch
  // unwritten: callers read only y. x does not overlap y or scratch.
  virtual void linear_add(const LinearWeight& w, const float* x, int64_t rows, float* scratch,
                          float* y);
  // out[r, i] = w[row0 + r, i] as float32, for r < nrows (NVFP4 and BF16).
  virtual void dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) = 0;

  // --- device copies (no staging through the host) ---
  // dst[r * dst_stride + c] = src[r * src_stride + c * src_col_stride] for r < rows, c < cols:
  // a block copy (src_col_stride 1), a transpose (src_stride 1, src_col_stride = the source's row
  // length) or a broadcast of one column (src_col_stride 0). src and dst do not overlap.
  virtual void copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                       int64_t src_col_stride, int64_t rows, int64_t cols) = 0;
  // dst[r * stride + c] = value for r < rows, c < cols (value 0.0f also zeroes int32 words).
  virtual void fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) = 0;
  // dst[dst_row[i], :] = src[src_row[i], :] for i < n over rows of `dim` floats; a null index
  // means i itself. Destination rows are distinct; src and dst do not overlap.
  virtual void copy_rows(const float* src, const int32_t* src_row, float* dst,
                         const int32_t* dst_row, int64_t n, int64_t dim) = 0;
  // dst[i] = src[index[i]] + offset[i] for i < n (codes -> embedding-table ids on the device).
  virtual void gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset,
                          int64_t n, int32_t* dst) = 0;

  // --- transformer pieces ---
  // out[r, :] = sum over ids of table rows (bf16 [*, dim]); ids is [rows, ids_per_row].
  virtual void embed_sum(const uint16_t* table_bf16, int64_t dim, const int32_t* ids, int64_t rows,
                         int64_t ids_per_row, float* out) = 0;
  // y[r, :] = x[r, :] / sqrt(mean(x^2) + eps) * w   (w bf16 [dim]); y may equal x.
  virtual void rms_norm(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t dim,
                        float eps, float* y) = 0;
  // Rotate-half rotary embedding in place on x [rows, heads, head_dim] at positions[r].
  virtual void rope(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                    const int32_t* positions, float theta) = 0;
  // The attention sublayer's work between its projections and attention, in one call: QK-norm
  // (an RMS norm over each head's head_dim values: q's with q_norm, k's with k_norm, both bf16
  // [head_dim]), rotary at positions[r] on q and k, then row r of k and of v stored into cache
  // row kv_row[r] of k_cache and v_cache. q [rows, heads, head_dim] and k [rows, kv_heads,
  // head_dim] are rewritten in place; v [rows, kv_heads, head_dim] is read. Bitwise what
  // rms_norm, rms_norm, rope, rope, copy_rows, copy_rows give on the same backend (the default
  // runs those six; a GPU fuses them into one launch).
  virtual void qk_norm_rope_cache(float* q, float* k, const float* v, int64_t rows, int64_t heads,
                                  int64_t kv_heads, int64_t head_dim, const uint16_t* q_norm,
                                  const uint16_t* k_norm, float eps, const int32_t* positions,
                                  float theta, const int32_t* kv_row, float* k_cache,
                                  float* v_cache);
  // Grouped-query attention of q [rows, n_heads, head_dim] over KV caches
  // k/v [*, n_kv_heads, head_dim]: row r's cache starts at cache row cache_row0[r] (null: row 0
  // for every row, one sequence) and it attends to that cache's positions
  // [max(0, positions[r] - window + 1), positions[r]] (window 0 = unlimited), softmax scale
  // 1/sqrt(head_dim). out is [rows, n_heads, head_dim].
  virtual void attention(const float* q, int64_t rows, const int32_t* positions,
                         const int32_t* cache_row0, const float* k_cache, const float* v_cache,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t window,
                         float* out) = 0;
  // out = silu(gate) * up, elementwise over n.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // y[i] += x[i] over n.
  virtual void add(const float* x, int64_t n, float* y) = 0;
  // y[i] = 1 / (1 + exp(-x[i])) over n (the shared expert's gate).
  virtual void sigmoid(const float* x, int64_t n, float* y) = 0;

  // --- mixture of experts (spec sections 1 and 5) ---
  // logits [rows, logit_stride]: the router's output. The layer stores n_stored experts; stored
  // expert s has original id original_id[s] and its logit in column logit_column[s] (= original id
  // for a full router, = s for a sliced one). Softmax over the stored experts (summed in increasing
  // original id order), top-k (ties to the lower original id), renormalised if norm_topk.
  // Writes expert_index [rows, k] (stored index s, in rank order) and weight [rows, k].
  virtual void route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                          const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                          int64_t k, bool norm_topk, int32_t* expert_index, float* weight) = 0;
  // The routed experts of a layer as device work: for every row r and rank j < k,
  // out[(r * out_slots + j), :] = down(silu(gate(x[r])) * up(x[r])) of stored expert
  // expert_index[r * k + j]. The rows that chose an expert are gathered on the device (in row,
  // then rank order) and each chosen expert runs once over them, so its weights are read once per
  // call for all rows; the expert choice never leaves the device. x is [rows, hidden];
  // workspace holds moe_workspace_floats(rows, k, hidden, inter) floats.
  virtual void moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x,
                           int64_t rows, int64_t hidden, const int32_t* expert_index, int64_t k,
                           int64_t out_slots, float* out, float* workspace) = 0;
  static int64_t moe_workspace_floats(int64_t rows, int64_t k, int64_t hidden, int64_t inter,
                                      int64_t n_stored);
  // y[r, :] += sum_j weight[r, j] * expert_out[r, j, :], j in rank order 0..k-1.
  virtual void expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                              int64_t dim, float* y) = 0;
  // y[r, :] = 0 + sum_j weight[r, j] * expert_out[r, j, :], j in rank order: bitwise what fill
  // with zeros then expert_combine give on the same backend (the default runs those two; a GPU
  // starts its sum from zero in one launch).
  virtual void expert_sum(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                          int64_t dim, float* y);
  // y += expert_sum(expert_out, weight, rows, k, dim) (the residual add after a MoE block):
  // bitwise expert_sum into `scratch` ([rows, dim]) then add(scratch, rows * dim, y) on the same
  // backend (the default makes those two calls; a GPU adds each sum to y in the same launch and
  // leaves scratch unwritten).
  virtual void expert_sum_add(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                              int64_t dim, float* scratch, float* y);
  // expert_sum_add, then yn = rms_norm(y, norm_w, eps) (the next layer's input norm): bitwise
  // expert_sum_add(expert_out, weight, rows, k, dim, scratch, y) then rms_norm(y, norm_w, rows,
  // dim, eps, yn) on the same backend (the default makes those two calls; a GPU adds and
  // normalises each row in one launch). yn must not overlap y.
  virtual void expert_sum_add_norm(const float* expert_out, const float* weight, int64_t rows,
                                   int64_t k, int64_t dim, float* scratch, float* y,
                                   const uint16_t* norm_w, float eps, float* yn);

  // --- guidance and sampling (spec section 6) ---
  // out[i, :] over n output rows of `vocab` logits as rows[i] says (GuidanceRow).
  virtual void guidance_combine(const float* logits, int64_t vocab, const GuidanceRow* rows,
                                int64_t n, float* out) = 0;
  // Draws one id per row i < n from logits [n, vocab] with rows[i]'s temperature, top-k and
  // top-p, u in [0,1) from the counter-based generator keyed by (rows[i].seed, rows[i].frame,
  // codebook), into ids[i * stride] on the device. A row holding NaN or Inf (a corrupted weight:
  // caught, never voiced) writes id 0 and sets flags[i * stride] = codebook + 1 unless it is
  // already set; flags are otherwise left as they are.
  virtual void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                           int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride) = 0;

  // --- codec (Mimi) ---
  // Causal-ready 1-D convolution over x [in_ch, len] (already padded by the caller), weight
  // [out_ch, in_ch/groups, kernel] float32, optional bias [out_ch]:
  // y[o, t] = b[o] + sum_{c,j} w[o, c, j] * x[g*in_per_group + c, t*stride + j*dilation],
  // t < out_len. y is [out_ch, out_len]. Every output element is reduced alone in one fixed order
  // (spec section 7), whatever len, out_len and the tiling: a codec pass lays several streams'
  // inputs side by side in one call and relies on each output equalling its own call's
  // (codec/mimi_layers.h). The same holds for conv_transpose1d.
  virtual void conv1d(const float* x, int64_t in_ch, int64_t len, const float* w, const float* bias,
                      int64_t out_ch, int64_t kernel, int64_t stride, int64_t dilation,
                      int64_t groups, float* y, int64_t out_len) = 0;
  // Transposed 1-D convolution, weight [in_ch, out_ch/groups, kernel]; full output
  // y [out_ch, (len - 1) * stride + kernel] (the caller trims).
  virtual void conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                                const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                                int64_t groups, float* y) = 0;
  virtual void elu(const float* x, int64_t n, float alpha, float* y) = 0;
  virtual void gelu(const float* x, int64_t n, float* y) = 0;  // exact (erf) GELU
  // LayerNorm over the last dim with float32 weight and bias.
  virtual void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim,
                          float eps, float* y) = 0;
  // y[r, :] = x[r, :] * scale[:]  (layer scale), dim-wise.
  virtual void scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim,
                          float* y) = 0;
  // Vector-quantizer decode: out[t, :] = codebook[codes[t], :] for t < n; codebook [size, dim].
  virtual void vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                         float* out) = 0;
  // Vector-quantizer encode: nearest codebook row by squared L2 (ties to the lower index).
  virtual void vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x,
                         int64_t n, int32_t* codes) = 0;

 protected:
  void count_expert_weight_bytes(uint64_t bytes) {
    expert_weight_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  virtual std::unique_ptr<DeviceBuffer> alloc_impl(size_t bytes) = 0;
  virtual void upload_impl(void* dst, const void* src, size_t bytes) = 0;
  virtual void download_impl(void* dst, const void* src, size_t bytes) = 0;
  // Runs or replays `work` (run_captured has checked nothing yet); the default runs it.
  virtual bool run_captured_impl(const std::string& key, const std::function<void()>& work) {
    (void)key;
    work();
    return false;
  }

 private:
  void refuse_inside_captured(const char* what) const;
  std::atomic<uint64_t> h2d_calls_{0}, h2d_bytes_{0}, d2h_calls_{0}, d2h_bytes_{0};
  std::atomic<uint64_t> allocs_{0}, alloc_bytes_{0}, expert_weight_bytes_{0};
};

// Cores in the process's affinity mask (what threads = 0 means).
int available_cores();

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda
  int threads = 0;            // 0 = all cores
  // CPU: work per extra thread before a loop is split across threads (< 0: the default; 0: split
  // every loop, for tests of thread invariance).
  double min_split_work = -1;
};

// Creates a backend; "auto" picks CUDA when built with it and a GPU is present, else CPU. An
// explicit "cuda" never falls back: it throws one clear error.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace drama

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

#include <cstdint>
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (avx512, 2 threads)"

  // --- memory ---
  virtual std::unique_ptr<DeviceBuffer> alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Makes a weight resident. `host` points into the mapped checkpoint; the CPU returns a view of
  // it (zero copy), a GPU copies it to device memory owned by the backend.
  virtual LinearWeight resident(const LinearWeight& host) = 0;
  virtual const void* resident_bytes(const void* host, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // --- matrix products ---
  // y[r, o] = sum_i x[r, i] * w[o, i]   for r < rows; x is [rows, w.in], y is [rows, w.out].
  virtual void linear(const LinearWeight& w, const float* x, int64_t rows, float* y) = 0;
  // out[r, i] = w[row0 + r, i] as float32, for r < nrows (NVFP4 and BF16).
  virtual void dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) = 0;

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
  // Grouped-query attention of q [rows, n_heads, head_dim] over one sequence's cache
  // k/v [capacity, n_kv_heads, head_dim]; row r attends to cache positions
  // [max(0, positions[r] - window + 1), positions[r]] (window 0 = unlimited), softmax scale
  // 1/sqrt(head_dim). out is [rows, n_heads, head_dim].
  virtual void attention(const float* q, int64_t rows, const int32_t* positions,
                         const float* k_cache, const float* v_cache, int64_t n_heads,
                         int64_t n_kv_heads, int64_t head_dim, int64_t window, float* out) = 0;
  // out = silu(gate) * up, elementwise over n.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // y[i] += x[i] over n.
  virtual void add(const float* x, int64_t n, float* y) = 0;

  // --- mixture of experts (spec sections 1 and 5) ---
  // logits [rows, logit_stride]: the router's output. The layer stores n_stored experts; stored
  // expert s has original id original_id[s] and its logit in column logit_column[s] (= original id
  // for a full router, = s for a sliced one). Softmax over the stored experts (summed in increasing
  // original id order), top-k (ties to the lower original id), renormalised if norm_topk.
  // Writes expert_index [rows, k] (stored index s, in rank order) and weight [rows, k].
  virtual void route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                          const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                          int64_t k, bool norm_topk, int32_t* expert_index, float* weight) = 0;
  // y[r, :] += sum_j weight[r, j] * expert_out[r, j, :], j in rank order 0..k-1.
  virtual void expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                              int64_t dim, float* y) = 0;

  // --- guidance and sampling (spec section 6) ---
  // out = uncond + gamma * (cond - uncond), in float32, over n.
  virtual void guidance_combine(const float* cond, const float* uncond, int64_t n, float gamma,
                                float* out) = 0;
  // Draws one id from logits [vocab] with temperature, top-k, top-p; u in [0,1) from the
  // counter-based generator keyed by (seed, frame, codebook). Returns to the host.
  virtual int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params,
                         uint64_t seed, uint64_t frame, uint64_t codebook) = 0;
  // 1 if any of n values is NaN or infinite (corrupted weights are caught, never voiced).
  virtual bool has_non_finite(const float* x, int64_t n) = 0;

  // --- codec (Mimi) ---
  // Causal-ready 1-D convolution over x [in_ch, len] (already padded by the caller), weight
  // [out_ch, in_ch/groups, kernel] float32, optional bias [out_ch]:
  // y[o, t] = b[o] + sum_{c,j} w[o, c, j] * x[g*in_per_group + c, t*stride + j*dilation],
  // t < out_len. y is [out_ch, out_len].
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

// The CUDA backend (docs/cuda-backend.md): device memory from cudaMalloc, weights copied to the
// device once, and kernels queued in order on one stream. Every kernel gives each output element
// one fixed reduction order that depends on the shapes of the call only (never on the row count,
// the position of a row in the batch or the launch's block count): no atomics in reductions, no
// split-K. Only files in this folder include this header.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace drama::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  cudaStream_t stream() const { return stream_; }
  // Whether run_captured captures and replays graphs (DRAMA_CUDA_GRAPHS, default on); returns the
  // previous setting. Off, captured work runs as it comes (time_each_kernel turns it off while it
  // times a step: a replay would launch no kernel it could time).
  bool set_graphs(bool on) {
    const bool before = graphs_;
    graphs_ = on;
    return before;
  }
  // Device scratch of at least `bytes`, valid until the next call that asks for scratch.
  void* scratch(size_t bytes);
  // At least `n` zeroed counters that persist between calls (attention: each (row, head)'s last
  // split merges, then sets its counter back to 0). Growing drops the captured graphs.
  unsigned* counters(size_t n);

  std::string name() const override;
  bool supports(const std::string&) const override { return true; }  // every kernel
  LinearWeight resident(const LinearWeight& host) override;
  const void* resident_bytes(const void* host, size_t bytes) override;
  void synchronize() override;
  void forget_captured() override;

  void copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
               int64_t src_col_stride, int64_t rows, int64_t cols) override;
  void fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) override;
  void copy_rows(const float* src, const int32_t* src_row, float* dst, const int32_t* dst_row,
                 int64_t n, int64_t dim) override;
  void gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset, int64_t n,
                  int32_t* dst) override;

  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y) override;
  void linear_add(const LinearWeight& w, const float* x, int64_t rows, float* scratch,
                  float* y) override;
  void linears(const Product* products, int64_t n, const float* x, int64_t rows) override;
  void dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) override;

  void embed_sum(const uint16_t* table_bf16, int64_t dim, const int32_t* ids, int64_t rows,
                 int64_t ids_per_row, float* out) override;
  void rms_norm(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t dim, float eps,
                float* y) override;
  void rope(float* x, int64_t rows, int64_t heads, int64_t head_dim, const int32_t* positions,
            float theta) override;
  void qk_norm_rope_cache(float* q, float* k, const float* v, int64_t rows, int64_t heads,
                          int64_t kv_heads, int64_t head_dim, const uint16_t* q_norm,
                          const uint16_t* k_norm, float eps, const int32_t* positions, float theta,
                          const int32_t* kv_row, float* k_cache, float* v_cache) override;
  void attention(const float* q, int64_t rows, const int32_t* positions, const int32_t* cache_row0,
                 const float* k_cache, const float* v_cache, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, int64_t window, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* x, int64_t n, float* y) override;
  void sigmoid(const float* x, int64_t n, float* y) override;

  void route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                  const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                  int64_t k, bool norm_topk, int32_t* expert_index, float* weight) override;
  void expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                      int64_t dim, float* y) override;
  void expert_sum(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                  int64_t dim, float* y) override;
  void expert_sum_add(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                      int64_t dim, float* scratch, float* y) override;
  void expert_sum_add_norm(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                           int64_t dim, float* scratch, float* y, const uint16_t* norm_w, float eps,
                           float* yn) override;
  // The routed experts of a layer on the device (moe.cuh); `experts` is a host array of
  // n_stored resident weights, uploaded once as a device table per array.
  void prepare_experts(const ExpertWeights* experts, int64_t n_stored) override;
  void moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x, int64_t rows,
                   int64_t hidden, const int32_t* expert_index, int64_t k, int64_t out_slots,
                   float* out, float* workspace) override;
  // Which grouped expert kernels moe_experts runs (1, 2 or 3, moe.cuh): DRAMA_CUDA_EXPERTS=v1|v2|v3
  // read at construction (default 3), or set_moe_experts_version (grouped_experts.h).
  int experts_version() const { return experts_version_; }
  // Nodes (kernel launches and copies) of the graph captured under `key`; -1 when none is.
  int64_t graph_nodes(const std::string& key) const {
    const auto it = captured_.find(key);
    return it == captured_.end() || !it->second.exec ? -1 : it->second.nodes;
  }
  void set_experts_version(int version) {
    experts_version_ = version;
    forget_captured();  // captured steps hold the other version's launches
  }

  void guidance_combine(const float* logits, int64_t vocab, const GuidanceRow* rows, int64_t n,
                        float* out) override;
  void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                   int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride) override;

  void conv1d(const float* x, int64_t in_ch, int64_t len, const float* w, const float* bias,
              int64_t out_ch, int64_t kernel, int64_t stride, int64_t dilation, int64_t groups,
              float* y, int64_t out_len) override;
  void conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                        const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                        int64_t groups, float* y) override;
  void elu(const float* x, int64_t n, float alpha, float* y) override;
  void gelu(const float* x, int64_t n, float* y) override;
  void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim,
                  float eps, float* y) override;
  void scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim, float* y) override;
  void vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                 float* out) override;
  void vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x, int64_t n,
                 int32_t* codes) override;

 protected:
  std::unique_ptr<DeviceBuffer> alloc_impl(size_t bytes) override;
  void upload_impl(void* dst, const void* src, size_t bytes) override;
  void download_impl(void* dst, const void* src, size_t bytes) override;
  // A key's first run as it comes (scratch growth), its second captured into a CUDA graph on the
  // stream, then replays; DRAMA_CUDA_GRAPHS=0 runs every step as it comes. A key whose capture
  // failed runs as it comes from then on (failed_, which forget_captured keeps).
  bool run_captured_impl(const std::string& key, const std::function<void()>& work) override;

 private:
  struct Captured {
    int runs = 0;
    cudaGraphExec_t exec = nullptr;
    int64_t nodes = 0;
  };
  std::map<std::string, Captured> captured_;
  std::set<std::string> failed_;  // keys whose capture failed: they run as they come
  bool graphs_ = true;
  uint64_t scratch_generation_ = 0;  // a new scratch or counter area drops every captured graph
  // A new area of at least `bytes` (plus half) in place of `area`, after the queued kernels.
  void replace_area(std::unique_ptr<DeviceBuffer>& area, size_t bytes);
  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  // Resident weights (freed with the backend) and the scratch area.
  std::vector<std::unique_ptr<DeviceBuffer>> resident_;
  std::unique_ptr<DeviceBuffer> scratch_;
  std::unique_ptr<DeviceBuffer> counters_;
  // moe_experts(): device tables of expert pointers, by (host array, its first weight), each with
  // the weights it was made from. The key alone does not identify the experts: a caller that frees
  // its array and weights (tests/model/test_cuda_parity.cpp, once per shape) can get both addresses
  // back for other experts, so a table is used only while its weights equal the array's (moe.cu).
  struct ExpertTable {
    std::vector<ExpertWeights> experts;
    std::unique_ptr<DeviceBuffer> device;
    bool on16 = false;  // every codes and scales pointer on 16 bytes (launch_moe_experts)
  };
  std::map<std::pair<const void*, const void*>, ExpertTable> expert_tables_;
  int experts_version_ = 3;
};

}  // namespace drama::cuda

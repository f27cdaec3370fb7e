// The CPU backend: host memory, zero-copy weights, and kernels with scalar / AVX2 / AVX-512
// variants chosen at run time (docs/cpu-backend.md). Every kernel partitions its OUTPUT elements
// across threads and reduces each element in one fixed order, so results are bitwise independent
// of the thread count and of the other rows in a batch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/thread_pool.h"
#include "util/sampling.h"

namespace drama::cpu {

// Sizes the calling thread's kernel scratch (CpuBackend::Scratch) for every model here; the
// thread pool runs it at each worker's start.
void warm_thread_scratch();

class CpuBackend final : public Backend {
 public:
  // threads >= 1. The ISA is normally cpu::select_isa() (honours DRAMA_CPU_ISA).
  // min_split_work: work per extra thread before a loop is split (ThreadPool; kAutoSplit: the
  // wait mode's default); 0 splits every loop, which the thread-invariance tests
  // and the contract's thread twins use. wait: how idle threads wait (ThreadPool::Wait).
  CpuBackend(int threads, Isa isa, double min_split_work = ThreadPool::kAutoSplit,
             ThreadPool::Wait wait = ThreadPool::Wait::Auto);

  Isa isa() const { return isa_; }
  int threads() const { return pool_.threads(); }
  const ThreadPool& pool() const { return pool_; }

  std::string name() const override;
  bool supports(const std::string&) const override { return true; }  // every kernel
  LinearWeight resident(const LinearWeight& host) override { return host; }
  const void* resident_bytes(const void* host, size_t) override { return host; }
  void synchronize() override {}

  void copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
               int64_t src_col_stride, int64_t rows, int64_t cols) override;
  void fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) override;
  void copy_rows(const float* src, const int32_t* src_row, float* dst, const int32_t* dst_row,
                 int64_t n, int64_t dim) override;
  void gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset, int64_t n,
                  int32_t* dst) override;

  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y) override;
  void dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) override;

  void embed_sum(const uint16_t* table_bf16, int64_t dim, const int32_t* ids, int64_t rows,
                 int64_t ids_per_row, float* out) override;
  void rms_norm(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t dim, float eps,
                float* y) override;
  void rope(float* x, int64_t rows, int64_t heads, int64_t head_dim, const int32_t* positions,
            float theta) override;
  void attention(const float* q, int64_t rows, const int32_t* positions, const int32_t* cache_row0,
                 const float* k_cache, const float* v_cache, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, int64_t window, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* x, int64_t n, float* y) override;
  void sigmoid(const float* x, int64_t n, float* y) override;

  void route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                  const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                  int64_t k, bool norm_topk, int32_t* expert_index, float* weight) override;
  void moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x, int64_t rows,
                   int64_t hidden, const int32_t* expert_index, int64_t k, int64_t out_slots,
                   float* out, float* workspace) override;
  void expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                      int64_t dim, float* y) override;

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

 private:
  // The calling thread's kernel scratch (routing probabilities and ranks, sampling), kept for
  // the thread's life: per thread, so callers on several host threads never
  // share it, and sized at a worker's start (warm_thread_scratch, the pool's start hook) for
  // every model here, so a decode step allocates nothing whichever thread runs a chunk. It grows
  // (doubling) only past those sizes.
  struct Scratch {
    std::vector<float> f;
    std::vector<int32_t> i;
    SampleScratch sample;
  };
  static Scratch& thread_scratch(size_t floats, size_t ints, size_t vocab);
  friend void warm_thread_scratch();
  // Elementwise kernels split [0, n) in chunks of this many elements.
  void elementwise(int64_t n, const ThreadPool::Range& fn);

  // linear in pieces (moe_experts runs many products in one parallel loop): the work of one
  // output column; the activations in the layout w's kernel reads (SIMD NVFP4 paths: a copy
  // written into xp, 64-byte aligned, prepared_floats(w) floats per row; else x itself); and the
  // columns [o0, o1) of y = x w^T from them. The same columns give the same bits however they
  // are split.
  static double linear_column_work(const LinearWeight& w, int64_t rows);
  bool nvfp4_wide() const;
  bool needs_preparing(const LinearWeight& w) const;
  int64_t prepared_floats(const LinearWeight& w) const;
  static float* aligned_floats(std::vector<float>& buffer, size_t n);  // n floats, aligned
  const float* prepare_activations(const LinearWeight& w, const float* x, int64_t rows,
                                   float* xp) const;
  void linear_columns(const LinearWeight& w, const float* xp, int64_t rows, float* y, int64_t o0,
                      int64_t o1) const;

  Isa isa_;
  ThreadPool pool_;
};

}  // namespace drama::cpu

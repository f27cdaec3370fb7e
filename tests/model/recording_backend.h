// A backend that captures as a CUDA graph does, on the CPU: the second run of a key is recorded
// (each kernel call with its arguments by value, nothing executed while recording), then the
// recording runs, and every later run of the key replays it. Whatever a step passes by value
// that its key does not determine would be replayed stale, so codes equal to the plain
// backend's show that the step's launches depend on its key alone (tests/model/test_sessions).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace drama::testing {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  int64_t replays() const { return replays_; }
  int64_t recordings() const { return recordings_; }
  void forget_captured() override { keys_.clear(); }

  std::string name() const override { return "recording " + in_->name(); }
  bool supports(const std::string& k) const override { return in_->supports(k); }
  LinearWeight resident(const LinearWeight& host) override { return in_->resident(host); }
  const void* resident_bytes(const void* host, size_t bytes) override {
    return in_->resident_bytes(host, bytes);
  }
  void synchronize() override { in_->synchronize(); }

  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y) override {
    call([=, this] { in_->linear(w, x, rows, y); });
  }
  void dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) override {
    call([=, this] { in_->dequantize(w, row0, nrows, out); });
  }
  void copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
               int64_t src_col_stride, int64_t rows, int64_t cols) override {
    call([=, this] { in_->copy_2d(dst, dst_stride, src, src_stride, src_col_stride, rows, cols); });
  }
  void fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) override {
    call([=, this] { in_->fill(dst, stride, rows, cols, value); });
  }
  void copy_rows(const float* src, const int32_t* src_row, float* dst, const int32_t* dst_row,
                 int64_t n, int64_t dim) override {
    call([=, this] { in_->copy_rows(src, src_row, dst, dst_row, n, dim); });
  }
  void gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset, int64_t n,
                  int32_t* dst) override {
    call([=, this] { in_->gather_ids(src, index, offset, n, dst); });
  }
  void embed_sum(const uint16_t* table, int64_t dim, const int32_t* ids, int64_t rows,
                 int64_t ids_per_row, float* out) override {
    call([=, this] { in_->embed_sum(table, dim, ids, rows, ids_per_row, out); });
  }
  void rms_norm(const float* x, const uint16_t* w, int64_t rows, int64_t dim, float eps,
                float* y) override {
    call([=, this] { in_->rms_norm(x, w, rows, dim, eps, y); });
  }
  void rope(float* x, int64_t rows, int64_t heads, int64_t head_dim, const int32_t* positions,
            float theta) override {
    call([=, this] { in_->rope(x, rows, heads, head_dim, positions, theta); });
  }
  void attention(const float* q, int64_t rows, const int32_t* positions, const int32_t* cache_row0,
                 const float* k_cache, const float* v_cache, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, int64_t window, float* out) override {
    call([=, this] {
      in_->attention(q, rows, positions, cache_row0, k_cache, v_cache, n_heads, n_kv_heads,
                     head_dim, window, out);
    });
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    call([=, this] { in_->swiglu(gate, up, n, out); });
  }
  void add(const float* x, int64_t n, float* y) override {
    call([=, this] { in_->add(x, n, y); });
  }
  void sigmoid(const float* x, int64_t n, float* y) override {
    call([=, this] { in_->sigmoid(x, n, y); });
  }
  void route_topk(const float* logits, int64_t rows, int64_t logit_stride,
                  const int32_t* logit_column, const int32_t* original_id, int64_t n_stored,
                  int64_t k, bool norm_topk, int32_t* expert_index, float* weight) override {
    call([=, this] {
      in_->route_topk(logits, rows, logit_stride, logit_column, original_id, n_stored, k, norm_topk,
                      expert_index, weight);
    });
  }
  void prepare_experts(const ExpertWeights* experts, int64_t n_stored) override {
    in_->prepare_experts(experts, n_stored);  // at load, not recorded
  }
  void moe_experts(const ExpertWeights* experts, int64_t n_stored, const float* x, int64_t rows,
                   int64_t hidden, const int32_t* expert_index, int64_t k, int64_t out_slots,
                   float* out, float* workspace) override {
    call([=, this] {
      in_->moe_experts(experts, n_stored, x, rows, hidden, expert_index, k, out_slots, out,
                       workspace);
    });
  }
  void expert_combine(const float* expert_out, const float* weight, int64_t rows, int64_t k,
                      int64_t dim, float* y) override {
    call([=, this] { in_->expert_combine(expert_out, weight, rows, k, dim, y); });
  }
  void guidance_combine(const float* logits, int64_t vocab, const GuidanceRow* rows, int64_t n,
                        float* out) override {
    call([=, this] { in_->guidance_combine(logits, vocab, rows, n, out); });
  }
  void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n,
                   int64_t codebook, int32_t* ids, int32_t* flags, int64_t stride) override {
    call([=, this] { in_->sample_rows(logits, vocab, rows, n, codebook, ids, flags, stride); });
  }
  void conv1d(const float* x, int64_t in_ch, int64_t len, const float* w, const float* bias,
              int64_t out_ch, int64_t kernel, int64_t stride, int64_t dilation, int64_t groups,
              float* y, int64_t out_len) override {
    call([=, this] {
      in_->conv1d(x, in_ch, len, w, bias, out_ch, kernel, stride, dilation, groups, y, out_len);
    });
  }
  void conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                        const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                        int64_t groups, float* y) override {
    call([=, this] {
      in_->conv_transpose1d(x, in_ch, len, w, bias, out_ch, kernel, stride, groups, y);
    });
  }
  void elu(const float* x, int64_t n, float alpha, float* y) override {
    call([=, this] { in_->elu(x, n, alpha, y); });
  }
  void gelu(const float* x, int64_t n, float* y) override {
    call([=, this] { in_->gelu(x, n, y); });
  }
  void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim,
                  float eps, float* y) override {
    call([=, this] { in_->layer_norm(x, w, b, rows, dim, eps, y); });
  }
  void scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim,
                  float* y) override {
    call([=, this] { in_->scale_rows(x, scale, rows, dim, y); });
  }
  void vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                 float* out) override {
    call([=, this] { in_->vq_decode(codebook, dim, codes, n, out); });
  }
  void vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x, int64_t n,
                 int32_t* codes) override {
    call([=, this] { in_->vq_encode(codebook, size, dim, x, n, codes); });
  }

 protected:
  std::unique_ptr<DeviceBuffer> alloc_impl(size_t bytes) override { return in_->alloc(bytes); }
  void upload_impl(void* dst, const void* src, size_t bytes) override {
    in_->upload(dst, src, bytes);
  }
  void download_impl(void* dst, const void* src, size_t bytes) override {
    in_->download(dst, src, bytes);
  }
  bool run_captured_impl(const std::string& key, const std::function<void()>& work) override {
    Key& k = keys_[key];
    if (k.recorded) {
      for (const auto& f : k.calls) f();
      ++replays_;
      return true;
    }
    if (k.runs++ == 0) {  // the first run as it comes (as CUDA's)
      work();
      return false;
    }
    recording_ = &k.calls;
    try {
      work();
    } catch (...) {
      recording_ = nullptr;
      throw;
    }
    recording_ = nullptr;
    k.recorded = true;
    ++recordings_;
    for (const auto& f : k.calls) f();  // a captured graph's first launch
    return false;
  }

 private:
  struct Key {
    int runs = 0;
    bool recorded = false;
    std::vector<std::function<void()>> calls;
  };
  void call(std::function<void()> f) {
    if (recording_)
      recording_->push_back(std::move(f));
    else
      f();
  }
  std::unique_ptr<Backend> in_;
  std::map<std::string, Key> keys_;
  std::vector<std::function<void()>>* recording_ = nullptr;
  int64_t replays_ = 0, recordings_ = 0;
};

}  // namespace drama::testing

// Helpers the codec composes from Backend kernels (backend.h), kept in one place so that a
// backend can later provide them directly: float32 linear layers (as a 1-D convolution, see
// linear_f32), strided block copies, transposes and fills (the backend's device copies: nothing
// is staged through host memory).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace drama {

// A growable float32 device array (contents are lost when it grows).
class DeviceArray {
 public:
  float* ensure(Backend& backend, int64_t count);
  float* data() const { return data_; }
  int64_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<DeviceBuffer> buffer_;
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

class CodecOps {
 public:
  explicit CodecOps(Backend& backend) : backend_(backend) {}
  Backend& backend() const { return backend_; }

  // y[r, o] = sum_i x[r, i] * w[o, i] for float32 weights given TRANSPOSED, wt [in, out]
  // (MimiModel stores them so). Each y[r, o] is summed over i in increasing order.
  void linear_f32(const float* wt, int64_t out, int64_t in, const float* x, int64_t rows, float* y);
  // dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols. src and dst do
  // not overlap.
  void copy_block(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                  int64_t rows, int64_t cols);
  // dst [cols, rows] = transpose of src [rows, cols].
  void transpose(const float* src, int64_t rows, int64_t cols, float* dst);
  // dst[r * stride + c] = value for r < rows, c < cols.
  void fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value);
  // Column `src_col` of src [rows, src_stride] copied into columns [dst_col, dst_col + count)
  // of dst [rows, dst_stride] (replicate padding).
  void replicate_column(float* dst, int64_t dst_stride, int64_t dst_col, int64_t count,
                        const float* src, int64_t src_stride, int64_t src_col, int64_t rows);

 private:
  Backend& backend_;
};

}  // namespace drama

#include "codec/codec_ops.h"

#include <algorithm>

namespace drama {

float* DeviceArray::ensure(Backend& backend, int64_t count) {
  count = std::max<int64_t>(count, 1);
  if (count > capacity_) {
    buffer_ = backend.alloc(static_cast<size_t>(count) * sizeof(float));
    data_ = buffer_->f32();
    capacity_ = count;
  }
  return data_;
}

void CodecOps::linear_f32(const float* wt, int64_t out, int64_t in, const float* x, int64_t rows,
                          float* y) {
  // A convolution whose "weights" are the activation rows and whose "signal" is wt: with
  // kernel = in, dilation = out and stride 1, y[r, o] = sum_i x[r, i] * wt[i * out + o]. Output
  // channels are rows, output steps are features, so y comes out row-major [rows, out] and the
  // innermost loop runs along contiguous rows of wt (an axpy per input feature).
  backend_.conv1d(wt, 1, in * out, x, nullptr, rows, in, 1, out, 1, y, out);
}

void CodecOps::copy_block(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                          int64_t rows, int64_t cols) {
  if (rows > 0 && cols > 0) backend_.copy_2d(dst, dst_stride, src, src_stride, 1, rows, cols);
}

void CodecOps::transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  // dst[c, r] = src[r, c]: dst's row c reads src's column c.
  if (rows > 0 && cols > 0) backend_.copy_2d(dst, rows, src, 1, cols, cols, rows);
}

void CodecOps::fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) {
  if (rows > 0 && cols > 0) backend_.fill(dst, stride, rows, cols, value);
}

void CodecOps::replicate_column(float* dst, int64_t dst_stride, int64_t dst_col, int64_t count,
                                const float* src, int64_t src_stride, int64_t src_col,
                                int64_t rows) {
  if (rows > 0 && count > 0)
    backend_.copy_2d(dst + dst_col, dst_stride, src + src_col, src_stride, 0, rows, count);
}

}  // namespace drama

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
  if (rows <= 0 || cols <= 0) return;
  host_.resize(static_cast<size_t>(rows * cols));
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(float);
  if (src_stride == cols) {
    backend_.download(host_.data(), src, row_bytes * rows);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      backend_.download(host_.data() + r * cols, src + r * src_stride, row_bytes);
  }
  if (dst_stride == cols) {
    backend_.upload(dst, host_.data(), row_bytes * rows);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      backend_.upload(dst + r * dst_stride, host_.data() + r * cols, row_bytes);
  }
}

void CodecOps::transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  if (rows == 1 || cols == 1) {  // same memory layout
    copy_block(dst, rows * cols, src, rows * cols, 1, rows * cols);
    return;
  }
  std::vector<float> in(static_cast<size_t>(rows * cols));
  backend_.download(in.data(), src, in.size() * sizeof(float));
  host_.resize(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) host_[c * rows + r] = in[r * cols + c];
  backend_.upload(dst, host_.data(), in.size() * sizeof(float));
}

void CodecOps::fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) {
  if (rows <= 0 || cols <= 0) return;
  host_.assign(static_cast<size_t>(cols), value);
  for (int64_t r = 0; r < rows; ++r)
    backend_.upload(dst + r * stride, host_.data(), static_cast<size_t>(cols) * sizeof(float));
}

void CodecOps::replicate_column(float* dst, int64_t dst_stride, int64_t dst_col, int64_t count,
                                const float* src, int64_t src_stride, int64_t src_col,
                                int64_t rows) {
  if (rows <= 0 || count <= 0) return;
  std::vector<float> column(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    backend_.download(&column[r], src + r * src_stride + src_col, sizeof(float));
  host_.resize(static_cast<size_t>(count));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(host_.begin(), host_.end(), column[r]);
    backend_.upload(dst + r * dst_stride + dst_col, host_.data(),
                    static_cast<size_t>(count) * sizeof(float));
  }
}

}  // namespace drama

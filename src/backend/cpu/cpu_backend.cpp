#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "backend/cpu/linear.h"
#include "util/dtype.h"
#include "util/error.h"

namespace drama::cpu {
namespace {

// Host memory aligned to a cache line (SIMD loads never straddle one at a buffer's start).
class HostBuffer final : public DeviceBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_ = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !data_) throw std::bad_alloc();
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

// Output columns per work item: enough to amortise dispatch, small enough to balance.
constexpr int64_t kLinearGrain = 16;

}  // namespace

CpuBackend::CpuBackend(int threads, Isa isa, double min_split_work, ThreadPool::Wait wait)
    : isa_(isa), pool_(threads, min_split_work, wait, &warm_thread_scratch) {
  if (!isa_supported(isa))
    throw Error("the CPU backend's " + std::string(isa_name(isa)) +
                " path is not supported by this CPU.");
}

CpuBackend::Scratch& CpuBackend::thread_scratch(size_t floats, size_t ints, size_t vocab) {
  thread_local Scratch s;
  // Doubling, so that a size creeping up never reallocates at every call.
  auto grow = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(std::max(n, 2 * v.size()));
  };
  grow(s.f, floats);
  grow(s.i, ints);
  if (s.sample.s.capacity() < vocab)
    reserve_sample_scratch(s.sample, std::max(vocab, static_cast<size_t>(4096)));
  return s;
}

void warm_thread_scratch() {
  // 4096 experts and a 4096-entry vocabulary: beyond every model here.
  CpuBackend::thread_scratch(4096, 4096, 4096);
}

std::string CpuBackend::name() const {
  if (threads() == 1) return "cpu (" + std::string(isa_name(isa_)) + ", 1 thread)";
  return "cpu (" + std::string(isa_name(isa_)) + ", " + std::to_string(threads()) + " threads, " +
         (pool_.wait_mode() == ThreadPool::Wait::Spin ? "spin" : "sleep") + " wait)";
}

std::unique_ptr<DeviceBuffer> CpuBackend::alloc_impl(size_t bytes) {
  return std::make_unique<HostBuffer>(bytes);
}

void CpuBackend::upload_impl(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::download_impl(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                         int64_t src_col_stride, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * dst_stride;
    const float* s = src + r * src_stride;
    if (src_col_stride == 1) {
      std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float));
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = s[c * src_col_stride];
    }
  }
}

void CpuBackend::fill(float* dst, int64_t stride, int64_t rows, int64_t cols, float value) {
  for (int64_t r = 0; r < rows; ++r) std::fill(dst + r * stride, dst + r * stride + cols, value);
}

void CpuBackend::copy_rows(const float* src, const int32_t* src_row, float* dst,
                           const int32_t* dst_row, int64_t n, int64_t dim) {
  const size_t bytes = static_cast<size_t>(dim) * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = src_row ? src_row[i] : i, d = dst_row ? dst_row[i] : i;
    std::memcpy(dst + d * dim, src + s * dim, bytes);
  }
}

void CpuBackend::gather_ids(const int32_t* src, const int32_t* index, const int32_t* offset,
                            int64_t n, int32_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[index[i]] + offset[i];
}

void CpuBackend::elementwise(int64_t n, const ThreadPool::Range& fn) {
  // Small vectors are not worth a wake-up of the workers.
  pool_.parallel_for(n, 1 << 12, 8.0, fn);  // about 8 bytes read and written per element
}

double CpuBackend::linear_column_work(const LinearWeight& w, int64_t rows) {
  // The weight bytes a column streams plus one unit per multiply-add.
  return (w.format == WeightFormat::NVFP4 ? static_cast<double>(w.in) * (0.5 + 1.0 / 16)
                                          : static_cast<double>(w.in) * 2) +
         static_cast<double>(w.in) * static_cast<double>(rows);
}

bool CpuBackend::nvfp4_wide() const {
  return isa_ == Isa::Avx512 && nvfp4_avx512_supported();
}

int64_t CpuBackend::prepared_floats(const LinearWeight& w) const {
  if (!needs_preparing(w)) return w.in;
  return nvfp4_wide() ? nvfp4_prepared_floats_avx512(w.in) : nvfp4_prepared_floats_avx2(w.in);
}

bool CpuBackend::needs_preparing(const LinearWeight& w) const {
  return w.format == WeightFormat::NVFP4 && isa_ != Isa::Scalar;
}

float* CpuBackend::aligned_floats(std::vector<float>& buffer, size_t n) {
  // Started on a cache line, so that no 64-byte activation load straddles two (prepared rows are
  // whole lines apart).
  if (buffer.size() < n + 16) buffer.resize(n + 16);
  float* p = buffer.data();
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64 / sizeof(float);
}

const float* CpuBackend::prepare_activations(const LinearWeight& w, const float* x, int64_t rows,
                                             float* xp) const {
  if (!needs_preparing(w)) return x;
  if (nvfp4_wide())
    nvfp4_prepare_x_avx512(x, rows, w.in, xp);
  else
    nvfp4_prepare_x_avx2(x, rows, w.in, xp);
  return xp;
}

void CpuBackend::linear_columns(const LinearWeight& w, const float* xp, int64_t rows, float* y,
                                int64_t o0, int64_t o1) const {
  if (w.format == WeightFormat::NVFP4) {
    if (isa_ == Isa::Scalar)
      nvfp4_linear_scalar(w, xp, rows, y, o0, o1);
    else if (nvfp4_wide())
      nvfp4_linear_avx512(w, xp, rows, y, o0, o1);
    else
      nvfp4_linear_avx2(w, xp, rows, y, o0, o1);
    return;
  }
  switch (isa_) {
    case Isa::Scalar:
      bf16_linear_scalar(w, xp, rows, y, o0, o1);
      break;
    case Isa::Avx2:
      bf16_linear_avx2(w, xp, rows, y, o0, o1);
      break;
    case Isa::Avx512:
      bf16_linear_avx512(w, xp, rows, y, o0, o1);
      break;
  }
}

void CpuBackend::linear(const LinearWeight& w, const float* x, int64_t rows, float* y) {
  if (rows <= 0 || w.out <= 0) return;
  thread_local std::vector<float> prepared;
  const float* xp =
      needs_preparing(w)
          ? prepare_activations(
                w, x, rows,
                aligned_floats(prepared, static_cast<size_t>(prepared_floats(w) * rows)))
          : x;
  pool_.parallel_for(w.out, kLinearGrain, linear_column_work(w, rows),
                     [&](int64_t o0, int64_t o1) { linear_columns(w, xp, rows, y, o0, o1); });
}

void CpuBackend::dequantize(const LinearWeight& w, int64_t row0, int64_t nrows, float* out) {
  const int64_t in = w.in;
  pool_.parallel_for(nrows, 4, static_cast<double>(in) * 4.5, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = row0 + r;
      float* dst = out + r * in;
      if (w.format == WeightFormat::BF16) {
        const uint16_t* src = static_cast<const uint16_t*>(w.data) + o * in;
        for (int64_t i = 0; i < in; ++i) dst[i] = bf16_to_f32(src[i]);
        continue;
      }
      const uint8_t* codes = static_cast<const uint8_t*>(w.data) + o * (in / 2);
      const uint8_t* scales = w.scales + o * (in / 16);
      for (int64_t b = 0; b < in / 16; ++b) {
        // e2m1 * e4m3 is exact in float32; scale_2 rounds once, as in the linear kernels.
        const float s = e4m3_to_f32(scales[b]);
        for (int64_t j = 0; j < 8; ++j) {
          const uint8_t byte = codes[b * 8 + j];
          dst[b * 16 + 2 * j] = e2m1_to_f32(byte & 15) * s * w.scale2;
          dst[b * 16 + 2 * j + 1] = e2m1_to_f32(byte >> 4) * s * w.scale2;
        }
      }
    }
  });
}

}  // namespace drama::cpu

// Embedding sums, RMSNorm, rotary embedding and the elementwise transformer pieces (spec
// section 1). One thread per row range; each row is reduced sequentially.
#include <cmath>
#include <vector>

#include "backend/cpu/activations.h"
#include "backend/cpu/cpu_backend.h"
#include "util/dtype.h"

namespace drama::cpu {

void CpuBackend::embed_sum(const uint16_t* table_bf16, int64_t dim, const int32_t* ids,
                           int64_t rows, int64_t ids_per_row, float* out) {
  const double row_bytes = static_cast<double>(dim) * (4 + 2 * ids_per_row);
  pool_.parallel_for(rows, 1, row_bytes, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* o = out + r * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
      for (int64_t j = 0; j < ids_per_row; ++j) {
        const uint16_t* row = table_bf16 + static_cast<int64_t>(ids[r * ids_per_row + j]) * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += bf16_to_f32(row[d]);
      }
    }
  });
}

void CpuBackend::rms_norm(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t dim,
                          float eps, float* y) {
  pool_.parallel_for(rows, 1, static_cast<double>(dim) * 10, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double sum = 0.0;  // double: the sum of squares of a 1024-wide row loses nothing
      for (int64_t d = 0; d < dim; ++d) sum += static_cast<double>(xr[d]) * xr[d];
      const float mean = static_cast<float>(sum / static_cast<double>(dim));
      const float inv = 1.0f / std::sqrt(mean + eps);
      for (int64_t d = 0; d < dim; ++d) yr[d] = (xr[d] * inv) * bf16_to_f32(w_bf16[d]);
    }
  });
}

void CpuBackend::rope(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                      const int32_t* positions, float theta) {
  const int64_t half = head_dim / 2;
  // Scratch kept per thread (no allocation inside a step); the workers read it through this
  // reference, since a thread_local's name would name the worker's own copy.
  thread_local std::vector<double> inv_freq_storage;
  std::vector<double>& inv_freq = inv_freq_storage;
  inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
  // Per row: a sine and cosine per frequency (counted as 64 bytes of work) and the heads' values.
  const double row_work =
      static_cast<double>(half) * 64 + static_cast<double>(heads * head_dim) * 8;
  pool_.parallel_for(rows, 1, row_work, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double pos = positions[r];
      for (int64_t i = 0; i < half; ++i) {
        // As tools/reference computes it: the angle in float64, applied in float32.
        const float c = static_cast<float>(std::cos(pos * inv_freq[i]));
        const float s = static_cast<float>(std::sin(pos * inv_freq[i]));
        for (int64_t h = 0; h < heads; ++h) {
          float* v = x + (r * heads + h) * head_dim;
          const float a = v[i], b = v[i + half];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  });
}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  elementwise(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = silu_times(gate[i], up[i]);
  });
}

void CpuBackend::sigmoid(const float* x, int64_t n, float* y) {
  elementwise(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
  });
}

void CpuBackend::add(const float* x, int64_t n, float* y) {
  elementwise(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
  });
}

}  // namespace drama::cpu

// Codec (Mimi) kernels: convolutions, activations, LayerNorm, layer scale, vector quantizer
// (spec section 7). Plain loops with a fixed reduction order per output element; threads split
// output channels or rows.
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"

namespace drama::cpu {

void CpuBackend::conv1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                        const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                        int64_t dilation, int64_t groups, float* y, int64_t out_len) {
  const int64_t in_per_group = in_ch / groups, out_per_group = out_ch / groups;
  pool_.parallel_for(out_ch, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t g = o / out_per_group;
      float* yo = y + o * out_len;
      const float b = bias ? bias[o] : 0.0f;
      for (int64_t t = 0; t < out_len; ++t) yo[t] = b;
      for (int64_t c = 0; c < in_per_group; ++c) {
        const float* xc = x + (g * in_per_group + c) * len;
        const float* wc = w + (o * in_per_group + c) * kernel;
        for (int64_t j = 0; j < kernel; ++j) {
          const float wj = wc[j];
          const float* xs = xc + j * dilation;
          for (int64_t t = 0; t < out_len; ++t) yo[t] += wj * xs[t * stride];
        }
      }
    }
  });
}

void CpuBackend::conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                                  const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                                  int64_t groups, float* y) {
  const int64_t in_per_group = in_ch / groups, out_per_group = out_ch / groups;
  const int64_t out_len = (len - 1) * stride + kernel;
  pool_.parallel_for(out_ch, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t g = o / out_per_group, ol = o % out_per_group;
      float* yo = y + o * out_len;
      const float b = bias ? bias[o] : 0.0f;
      for (int64_t u = 0; u < out_len; ++u) yo[u] = b;
      // Each output element accumulates in (input channel, input step) order.
      for (int64_t c = 0; c < in_per_group; ++c) {
        const int64_t ci = g * in_per_group + c;
        const float* xc = x + ci * len;
        const float* wc = w + (ci * out_per_group + ol) * kernel;
        for (int64_t t = 0; t < len; ++t) {
          const float xv = xc[t];
          float* ys = yo + t * stride;
          for (int64_t j = 0; j < kernel; ++j) ys[j] += xv * wc[j];
        }
      }
    }
  });
}

void CpuBackend::elu(const float* x, int64_t n, float alpha, float* y) {
  elementwise(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = x[i] > 0.0f ? x[i] : alpha * std::expm1(x[i]);
  });
}

void CpuBackend::gelu(const float* x, int64_t n, float* y) {
  elementwise(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
  });
}

void CpuBackend::layer_norm(const float* x, const float* w, const float* b, int64_t rows,
                            int64_t dim, float eps, float* y) {
  pool_.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double sum = 0.0;
      for (int64_t d = 0; d < dim; ++d) sum += xr[d];
      const double mean = sum / static_cast<double>(dim);
      double var = 0.0;
      for (int64_t d = 0; d < dim; ++d) var += (xr[d] - mean) * (xr[d] - mean);
      const float m = static_cast<float>(mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(dim) + eps));
      for (int64_t d = 0; d < dim; ++d) yr[d] = (xr[d] - m) * inv * w[d] + b[d];
    }
  });
}

void CpuBackend::scale_rows(const float* x, const float* scale, int64_t rows, int64_t dim,
                            float* y) {
  pool_.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t d = 0; d < dim; ++d) y[r * dim + d] = x[r * dim + d] * scale[d];
  });
}

void CpuBackend::vq_decode(const float* codebook, int64_t dim, const int32_t* codes, int64_t n,
                           float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* row = codebook + static_cast<int64_t>(codes[t]) * dim;
    for (int64_t d = 0; d < dim; ++d) out[t * dim + d] = row[d];
  }
}

void CpuBackend::vq_encode(const float* codebook, int64_t size, int64_t dim, const float* x,
                           int64_t n, int32_t* codes) {
  pool_.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * dim;
      float best = std::numeric_limits<float>::infinity();
      int32_t best_index = 0;
      for (int64_t c = 0; c < size; ++c) {
        const float* row = codebook + c * dim;
        float dist = 0.0f;
        for (int64_t d = 0; d < dim; ++d) dist += (xt[d] - row[d]) * (xt[d] - row[d]);
        if (dist < best) {
          best = dist;
          best_index = static_cast<int32_t>(c);
        }
      }
      codes[t] = best_index;
    }
  });
}

}  // namespace drama::cpu

// AVX-512 matrix products. NVFP4 (W4A16) works on groups of 8 blocks (128 inputs) of a column:
// one 64-byte load holds a block per 64-bit lane; shifting the lanes right by 4p puts code p of
// each block in the low dword's and code p+8 in the high dword's low 4 bits, and vpermps (which
// reads only those 4 bits) maps them to floats through a 16-entry table. No byte widening and no
// per-step scale shuffle: the 8 steps accumulate unscaled per-block products, which are then
// scaled by the group's 8 block scales in one FMA. x is prepared once per call in the matching
// order. Four columns share every x load, two rows share every decode, and each (row, column)
// accumulator sees the same operation sequence whatever the tile, so results are batch
// invariant. BF16 widens weights to f32 by a shift (activations stay f32) and uses FMA.
// GCC 12's AVX-512 headers use _mm512_undefined_*() placeholders that trip -Wuninitialized when
// inlined into target-attributed functions; the warnings concern the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/linear.h"

#define DRAMA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace drama::cpu {
namespace {

constexpr int64_t kGroup = 128;  // inputs per group: 8 blocks, 64 code bytes, 8 scales

alignas(64) constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// e4m3 bytes (one per dword lane) to float, exactly: the 7 magnitude bits placed under the f32
// exponent/mantissa and multiplied by 2^(127-7) (subnormals included); 0x7f is NaN.
DRAMA_AVX512 inline __m512 e4m3_to_ps(__m512i b) {
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
  const __m512 f =
      _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1.0p120f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  const __m512 r = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
  return _mm512_mask_mov_ps(r, nan, _mm512_set1_ps(__builtin_nanf("")));
}

// The scales of 8 blocks, each in the two dword lanes of its block's 64-bit lane.
DRAMA_AVX512 inline __m512 group_scales(__m128i bytes) {
  const __m512i q = _mm512_cvtepu8_epi64(bytes);
  return e4m3_to_ps(_mm512_or_si512(q, _mm512_slli_epi64(q, 32)));
}

// One group of T columns x R rows. codes[t]: the group's 64 code bytes of column t; s[t]: its 8
// scale bytes. Per (t, r): two partial sums (even and odd steps p, each a mul then FMAs, so the
// FMA latency chains stay short) of decode(p) * x(p), added, then acc = fma(part, scales, acc).
template <int T, int R>
DRAMA_AVX512 inline __attribute__((always_inline)) void nvfp4_group(const __m512i (&codes)[T],
                                                                    const __m128i (&s)[T],
                                                                    const float* const (&x)[R],
                                                                    __m512 table,
                                                                    __m512 (&acc)[T][R]) {
  __m512 part[2][T][R];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    __m512 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm512_loadu_ps(x[i] + p * 16);
    for (int t = 0; t < T; ++t) {
      const __m512i idx = p == 0 ? codes[t] : _mm512_srli_epi64(codes[t], 4 * p);
      const __m512 wv = _mm512_permutexvar_ps(idx, table);
      for (int i = 0; i < R; ++i) {
        __m512& sum = part[p & 1][t][i];
        sum = p < 2 ? _mm512_mul_ps(wv, xv[i]) : _mm512_fmadd_ps(wv, xv[i], sum);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m512 scale = group_scales(s[t]);
    for (int i = 0; i < R; ++i)
      acc[t][i] = _mm512_fmadd_ps(_mm512_add_ps(part[0][t][i], part[1][t][i]), scale, acc[t][i]);
  }
}

// T output columns x R rows over all inputs; the last partial group is read with masked loads
// (missing blocks decode to zero weights against zero inputs, with zero scales).
template <int T, int R>
DRAMA_AVX512 void nvfp4_tile(const LinearWeight& w, const float* xp, int64_t xp_stride, int64_t o,
                             int64_t r, float* y) {
  const int64_t in = w.in, blocks = in / 16;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const uint8_t* c[T];
  const uint8_t* s[T];
  for (int t = 0; t < T; ++t) {
    c[t] = codes + (o + t) * (in / 2);
    s[t] = w.scales + (o + t) * blocks;
  }
  const float* x[R];
  for (int i = 0; i < R; ++i) x[i] = xp + (r + i) * xp_stride;
  const __m512 table = _mm512_load_ps(kE2m1);
  __m512 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm512_setzero_ps();
  __m512i q[T];
  __m128i sb[T];
  int64_t b0 = 0;
  for (; b0 + 8 <= blocks; b0 += 8) {
    for (int t = 0; t < T; ++t) {
      q[t] = _mm512_loadu_si512(c[t] + b0 * 8);
      sb[t] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s[t] + b0));
    }
    const float* xg[R];
    for (int i = 0; i < R; ++i) xg[i] = x[i] + b0 * 16;
    nvfp4_group<T, R>(q, sb, xg, table, acc);
  }
  if (b0 < blocks) {
    const int64_t nb = blocks - b0;
    const auto m = static_cast<__mmask8>((1u << nb) - 1);
    for (int t = 0; t < T; ++t) {
      q[t] = _mm512_maskz_loadu_epi64(m, c[t] + b0 * 8);
      sb[t] = _mm_maskz_loadu_epi8(m, s[t] + b0);
    }
    const float* xg[R];
    for (int i = 0; i < R; ++i) xg[i] = x[i] + b0 * 16;
    nvfp4_group<T, R>(q, sb, xg, table, acc);
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i)
      y[(r + i) * w.out + o + t] = _mm512_reduce_add_ps(acc[t][i]) * w.scale2;
}

template <int T>
DRAMA_AVX512 void nvfp4_columns(const LinearWeight& w, const float* xp, int64_t xp_stride,
                                int64_t rows, int64_t o, float* y) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) nvfp4_tile<T, 2>(w, xp, xp_stride, o, r, y);
  if (r < rows) nvfp4_tile<T, 1>(w, xp, xp_stride, o, r, y);
}

// Widens 16 bf16 values to f32.
DRAMA_AVX512 inline __m512 bf16_to_ps(const uint16_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

DRAMA_AVX512 inline __m512 bf16_to_ps_masked(const uint16_t* p, __mmask16 m) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// T columns x R rows of a BF16 product: acc[t][r] = fma(w, x, acc) over 16-input steps, the
// tail step masked (zero weights and inputs).
template <int T, int R>
DRAMA_AVX512 void bf16_tile(const LinearWeight& w, const float* x, int64_t o, int64_t r, float* y) {
  const int64_t in = w.in;
  const uint16_t* wr[T];
  for (int t = 0; t < T; ++t) wr[t] = static_cast<const uint16_t*>(w.data) + (o + t) * in;
  const float* xr[R];
  for (int i = 0; i < R; ++i) xr[i] = x + (r + i) * in;
  __m512 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    __m512 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm512_loadu_ps(xr[i] + k);
    for (int t = 0; t < T; ++t) {
      const __m512 wv = bf16_to_ps(wr[t] + k);
      for (int i = 0; i < R; ++i) acc[t][i] = _mm512_fmadd_ps(wv, xv[i], acc[t][i]);
    }
  }
  if (k < in) {
    const __mmask16 m = static_cast<__mmask16>((1u << (in - k)) - 1);
    __m512 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm512_maskz_loadu_ps(m, xr[i] + k);
    for (int t = 0; t < T; ++t) {
      const __m512 wv = bf16_to_ps_masked(wr[t] + k, m);
      for (int i = 0; i < R; ++i) acc[t][i] = _mm512_fmadd_ps(wv, xv[i], acc[t][i]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) y[(r + i) * w.out + o + t] = _mm512_reduce_add_ps(acc[t][i]);
}

template <int T>
DRAMA_AVX512 void bf16_columns(const LinearWeight& w, const float* x, int64_t rows, int64_t o,
                               float* y) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) bf16_tile<T, 2>(w, x, o, r, y);
  if (r < rows) bf16_tile<T, 1>(w, x, o, r, y);
}

}  // namespace

int64_t nvfp4_prepared_floats_avx512(int64_t in) {
  return (in + kGroup - 1) / kGroup * kGroup;
}

// Group g, step p, lane 2q + h holds input 128g + 16q + 8h + p (code p or p+8 of block q).
void nvfp4_prepare_x_avx512(const float* x, int64_t rows, int64_t in, float* xp) {
  const int64_t stride = nvfp4_prepared_floats_avx512(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    float* d = xp + r * stride;
    std::memset(d, 0, sizeof(float) * stride);
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = i / kGroup, j = i % kGroup, q = j / 16, h = (j % 16) / 8, p = j % 8;
      d[g * kGroup + p * 16 + 2 * q + h] = xr[i];
    }
  }
}

DRAMA_AVX512 void nvfp4_linear_avx512(const LinearWeight& w, const float* xp, int64_t rows,
                                      float* y, int64_t o0, int64_t o1) {
  const int64_t stride = nvfp4_prepared_floats_avx512(w.in);
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4) nvfp4_columns<4>(w, xp, stride, rows, o, y);
  for (; o < o1; ++o) nvfp4_columns<1>(w, xp, stride, rows, o, y);
}

DRAMA_AVX512 void bf16_linear_avx512(const LinearWeight& w, const float* x, int64_t rows, float* y,
                                     int64_t o0, int64_t o1) {
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4) bf16_columns<4>(w, x, rows, o, y);
  for (; o < o1; ++o) bf16_columns<1>(w, x, rows, o, y);
}

}  // namespace drama::cpu

// AVX-512 matrix products. NVFP4 (W4A16): 16 code bytes (two blocks of 16 inputs) are widened to
// 16 dword lanes; the low and high nibbles index a 16-entry float table with vpermps (which reads
// only the low 4 bits of each index, so the low nibble needs no mask); the products with the
// de-interleaved x are scaled per block and accumulated. Four output columns share every x load;
// two rows share every weight decode. Each (row, column) accumulator sees the same operation
// sequence whatever the tile, so results are batch invariant. BF16 widens weights to f32 by a
// shift (activations stay f32) and uses FMA.
// GCC 12's AVX-512 headers use _mm512_undefined_*() placeholders that trip -Wuninitialized when
// inlined into target-attributed functions; the warnings concern the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/linear.h"

#define DRAMA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace drama::cpu {
namespace {

constexpr int64_t kChunk = 32;  // inputs per step: 16 code bytes, 2 scale blocks

alignas(64) constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Lanes 0-7 take scale 2c, lanes 8-15 scale 2c+1 of a group of 16 block scales.
alignas(64) constexpr int32_t kScaleIndex[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

// Up to 16 e4m3 scale bytes to float, exactly: the 7 magnitude bits placed under the f32
// exponent/mantissa and multiplied by 2^(127-7) (subnormals included); 0x7f is NaN.
DRAMA_AVX512 inline __m512 e4m3_to_ps(__m128i bytes) {
  const __m512i b = _mm512_cvtepu8_epi32(bytes);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
  const __m512 f =
      _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1.0p120f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  const __m512 r = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
  return _mm512_mask_mov_ps(r, nan, _mm512_set1_ps(__builtin_nanf("")));
}

// T output columns x R rows, over all inputs. acc[t][r] receives, per 32-input step:
// p = wlo * xlo; p = fma(whi, xhi, p); acc = fma(p, scale, acc).
template <int T, int R>
DRAMA_AVX512 void nvfp4_tile(const LinearWeight& w, const float* xp, int64_t xp_stride, int64_t o,
                             int64_t r, float* y) {
  const int64_t in = w.in;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const uint8_t* c[T];
  const uint8_t* s[T];
  for (int t = 0; t < T; ++t) {
    c[t] = codes + (o + t) * (in / 2);
    s[t] = w.scales + (o + t) * (in / 16);
  }
  const float* x[R];
  for (int i = 0; i < R; ++i) x[i] = xp + (r + i) * xp_stride;
  const __m512 table = _mm512_load_ps(kE2m1);
  __m512 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm512_setzero_ps();

  const int64_t blocks = in / 16;
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int64_t nb = std::min<int64_t>(16, blocks - b0);  // blocks in this group
    const __mmask16 smask = static_cast<__mmask16>((1u << nb) - 1);
    __m512 sv[T];
    for (int t = 0; t < T; ++t) sv[t] = e4m3_to_ps(_mm_maskz_loadu_epi8(smask, s[t] + b0));
    for (int64_t cc = 0; cc * 2 < nb; ++cc) {
      const int64_t chunk = b0 / 2 + cc;
      const bool half = cc * 2 + 1 == nb;  // a last lone block of 16 inputs
      __m512 xlo[R], xhi[R];
      for (int i = 0; i < R; ++i) {
        xlo[i] = _mm512_loadu_ps(x[i] + chunk * kChunk);
        xhi[i] = _mm512_loadu_ps(x[i] + chunk * kChunk + 16);
      }
      const __m512i sidx = _mm512_load_si512(kScaleIndex[cc]);
      for (int t = 0; t < T; ++t) {
        const uint8_t* p = c[t] + chunk * 16;
        const __m128i raw = half ? _mm_maskz_loadu_epi8(0xff, p)
                                 : _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const __m512i v = _mm512_cvtepu8_epi32(raw);
        const __m512 wlo = _mm512_permutexvar_ps(v, table);
        const __m512 whi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
        const __m512 scale = _mm512_permutexvar_ps(sidx, sv[t]);
        for (int i = 0; i < R; ++i) {
          __m512 prod = _mm512_mul_ps(wlo, xlo[i]);
          prod = _mm512_fmadd_ps(whi, xhi[i], prod);
          acc[t][i] = _mm512_fmadd_ps(prod, scale, acc[t][i]);
        }
      }
    }
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
  return (in + kChunk - 1) / kChunk * kChunk;
}

void nvfp4_prepare_x_avx512(const float* x, int64_t rows, int64_t in, float* xp) {
  const int64_t stride = nvfp4_prepared_floats_avx512(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    float* d = xp + r * stride;
    std::memset(d, 0, sizeof(float) * stride);
    for (int64_t i = 0; i < in; ++i) {
      const int64_t chunk = i / kChunk, j = i % kChunk;
      d[chunk * kChunk + (j & 1) * 16 + j / 2] = xr[i];
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

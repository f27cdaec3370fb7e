// AVX2 + FMA matrix products, the fallback for CPUs without AVX-512. NVFP4 follows the AVX-512
// scheme on 256-bit vectors: a group is 4 blocks (64 inputs, 32 code bytes, one block per 64-bit
// lane); shifting the lanes right by 4p exposes codes p and p+8 of each block; vpermps (3 index
// bits) maps the magnitude and bit 3 is moved into the float's sign. Partial sums per group are
// scaled by the 4 block scales in one FMA. A partial last group is copied into a zeroed buffer.
// BF16 widens weights by a shift and uses FMA. Same tiles and invariance as the AVX-512 path.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/linear.h"

#define DRAMA_AVX2 __attribute__((target("avx2,fma")))

namespace drama::cpu {
namespace {

constexpr int64_t kGroup = 64;  // inputs per group: 4 blocks, 32 code bytes, 4 scales

// e2m1 magnitudes as float bits, each XORed with its own 3-bit index at bits 28-30: decode()
// XORs in the whole nibble shifted to bits 28-31, which cancels those bits again and leaves the
// sign bit (nibble bit 3) in bit 31. One XOR replaces an AND of the sign and an XOR.
struct MagnitudeTable {
  alignas(32) uint32_t bits[8];
};
constexpr MagnitudeTable make_magnitude_table() {
  constexpr uint32_t kF32[8] = {0x00000000u, 0x3f000000u, 0x3f800000u, 0x3fc00000u,
                                0x40000000u, 0x40400000u, 0x40800000u, 0x40c00000u};
  MagnitudeTable t{};
  for (uint32_t i = 0; i < 8; ++i) t.bits[i] = kF32[i] ^ (i << 28);
  return t;
}
constexpr MagnitudeTable kMagnitude = make_magnitude_table();

DRAMA_AVX2 inline __m256 e4m3_to_ps(__m256i b) {
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
  const __m256 f =
      _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1.0p120f));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  const __m256 r = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(f), sign));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
  return _mm256_blendv_ps(r, _mm256_set1_ps(__builtin_nanf("")), nan);
}

// Codes in the low 4 bits of each dword to floats (the bits above them do not matter).
DRAMA_AVX2 inline __m256 decode(__m256i idx, __m256 table) {
  const __m256 mag = _mm256_permutevar8x32_ps(table, idx);
  return _mm256_castsi256_ps(
      _mm256_xor_si256(_mm256_castps_si256(mag), _mm256_slli_epi32(idx, 28)));
}

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

template <int T, int R>
DRAMA_AVX2 inline __attribute__((always_inline)) void nvfp4_group(const uint8_t* const (&c)[T],
                                                                  const uint8_t* const (&s)[T],
                                                                  const float* const (&x)[R],
                                                                  __m256 table,
                                                                  __m256 (&acc)[T][R]) {
  __m256i q[T];
  for (int t = 0; t < T; ++t) q[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c[t]));
  __m256 part[2][T][R];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    __m256 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm256_loadu_ps(x[i] + p * 8);
    for (int t = 0; t < T; ++t) {
      const __m256 wv = decode(p == 0 ? q[t] : _mm256_srli_epi64(q[t], 4 * p), table);
      for (int i = 0; i < R; ++i) {
        __m256& sum = part[p & 1][t][i];
        sum = p < 2 ? _mm256_mul_ps(wv, xv[i]) : _mm256_fmadd_ps(wv, xv[i], sum);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    int32_t four;
    std::memcpy(&four, s[t], 4);
    const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
    const __m256 scale = e4m3_to_ps(_mm256_or_si256(b, _mm256_slli_epi64(b, 32)));
    for (int i = 0; i < R; ++i)
      acc[t][i] = _mm256_fmadd_ps(_mm256_add_ps(part[0][t][i], part[1][t][i]), scale, acc[t][i]);
  }
}

DRAMA_AVX2 inline float reduce(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

template <int T, int R>
DRAMA_AVX2 void nvfp4_tile(const LinearWeight& w, const float* xp, int64_t xp_stride, int64_t o,
                           int64_t r, float* y) {
  const int64_t in = w.in, blocks = in / 16;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const __m256 table =
      _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(kMagnitude.bits)));
  __m256 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm256_setzero_ps();
  const uint8_t* c[T];
  const uint8_t* s[T];
  const float* x[R];
  // The next T columns are prefetched while these are computed (as in the AVX-512 kernels): one
  // line of codes every other step, a line of scales every 64 blocks.
  const bool ahead = o + 2 * T <= w.out;
  int64_t b0 = 0;
  for (; b0 + 4 <= blocks; b0 += 4) {
    if (ahead && b0 % 8 == 0)
      for (int t = 0; t < T; ++t) {
        prefetch(codes + (o + T + t) * (in / 2) + b0 * 8);
        if (b0 % 64 == 0) prefetch(w.scales + (o + T + t) * blocks + b0);
      }
    for (int t = 0; t < T; ++t) {
      c[t] = codes + (o + t) * (in / 2) + b0 * 8;
      s[t] = w.scales + (o + t) * blocks + b0;
    }
    for (int i = 0; i < R; ++i) x[i] = xp + (r + i) * xp_stride + b0 * 16;
    nvfp4_group<T, R>(c, s, x, table, acc);
  }
  if (b0 < blocks) {
    const int64_t nb = blocks - b0;
    alignas(32) uint8_t tail_codes[T][32] = {}, tail_scales[T][4] = {};
    for (int t = 0; t < T; ++t) {
      std::memcpy(tail_codes[t], codes + (o + t) * (in / 2) + b0 * 8, nb * 8);
      std::memcpy(tail_scales[t], w.scales + (o + t) * blocks + b0, nb);
      c[t] = tail_codes[t];
      s[t] = tail_scales[t];
    }
    for (int i = 0; i < R; ++i) x[i] = xp + (r + i) * xp_stride + b0 * 16;
    nvfp4_group<T, R>(c, s, x, table, acc);
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) y[(r + i) * w.out + o + t] = reduce(acc[t][i]) * w.scale2;
}

// Many rows (prefill chunks, experts chosen by several rows, several lanes): each group of T
// columns is decoded once into L1 for a block of up to kRowBlock rows, whose accumulators live in
// memory, instead of once per row pair. Every (row, column) accumulator sees the operations of
// nvfp4_group in the same order (products of steps 0 and 1 by multiplication, later steps by FMA
// into the partial of their parity, then one FMA with the block scales), so the bits equal the
// row-pair tiles' and batch invariance holds across the two paths.
constexpr int64_t kRowBlock = 16;       // (smaller blocks for long rows measured slower)
constexpr int64_t kDecodeOnceRows = 3;  // from this many rows the decoded block is faster

template <int T>
DRAMA_AVX2 void nvfp4_row_block(const LinearWeight& w, const float* xp, int64_t xp_stride,
                                int64_t o, int64_t r0, int64_t nr, float* y) {
  const int64_t in = w.in, blocks = in / 16;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const __m256 table =
      _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(kMagnitude.bits)));
  __m256 acc[kRowBlock][T];
  for (int64_t i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  __m256 wv[T][8], scale[T];
  alignas(32) uint8_t tail_codes[T][32] = {}, tail_scales[T][4] = {};
  const bool ahead = o + 2 * T <= w.out;
  for (int64_t b0 = 0; b0 < blocks; b0 += 4) {
    const uint8_t* c[T];
    const uint8_t* s[T];
    if (b0 + 4 <= blocks) {
      if (ahead && b0 % 8 == 0)
        for (int t = 0; t < T; ++t) {
          prefetch(codes + (o + T + t) * (in / 2) + b0 * 8);
          if (b0 % 64 == 0) prefetch(w.scales + (o + T + t) * blocks + b0);
        }
      for (int t = 0; t < T; ++t) {
        c[t] = codes + (o + t) * (in / 2) + b0 * 8;
        s[t] = w.scales + (o + t) * blocks + b0;
      }
    } else {  // a partial last group through zero-padded copies, as nvfp4_tile
      const int64_t nb = blocks - b0;
      for (int t = 0; t < T; ++t) {
        std::memcpy(tail_codes[t], codes + (o + t) * (in / 2) + b0 * 8, nb * 8);
        std::memcpy(tail_scales[t], w.scales + (o + t) * blocks + b0, nb);
        c[t] = tail_codes[t];
        s[t] = tail_scales[t];
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c[t]));
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p)
        wv[t][p] = decode(p == 0 ? q : _mm256_srli_epi64(q, 4 * p), table);
      int32_t four;
      std::memcpy(&four, s[t], 4);
      const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
      scale[t] = e4m3_to_ps(_mm256_or_si256(b, _mm256_slli_epi64(b, 32)));
    }
    for (int64_t i = 0; i < nr; ++i) {
      const float* x = xp + (r0 + i) * xp_stride + b0 * 16;
      __m256 part[2][T];
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) {
        const __m256 xv = _mm256_loadu_ps(x + p * 8);
        for (int t = 0; t < T; ++t) {
          __m256& sum = part[p & 1][t];
          sum = p < 2 ? _mm256_mul_ps(wv[t][p], xv) : _mm256_fmadd_ps(wv[t][p], xv, sum);
        }
      }
      for (int t = 0; t < T; ++t)
        acc[i][t] = _mm256_fmadd_ps(_mm256_add_ps(part[0][t], part[1][t]), scale[t], acc[i][t]);
    }
  }
  for (int64_t i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) y[(r0 + i) * w.out + o + t] = reduce(acc[i][t]) * w.scale2;
}

template <int T>
DRAMA_AVX2 void nvfp4_columns(const LinearWeight& w, const float* xp, int64_t stride, int64_t rows,
                              int64_t o, float* y) {
  if (rows >= kDecodeOnceRows) {
    for (int64_t r = 0; r < rows; r += kRowBlock)
      nvfp4_row_block<T>(w, xp, stride, o, r, std::min(kRowBlock, rows - r), y);
    return;
  }
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) nvfp4_tile<T, 2>(w, xp, stride, o, r, y);
  if (r < rows) nvfp4_tile<T, 1>(w, xp, stride, o, r, y);
}

DRAMA_AVX2 inline __m256 bf16x8(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// T columns x R rows; 8-input steps, the tail step through zero-padded copies.
template <int T, int R>
DRAMA_AVX2 void bf16_tile(const LinearWeight& w, const float* x, int64_t o, int64_t r, float* y) {
  const int64_t in = w.in;
  const uint16_t* wr[T];
  for (int t = 0; t < T; ++t) wr[t] = static_cast<const uint16_t*>(w.data) + (o + t) * in;
  const float* xr[R];
  for (int i = 0; i < R; ++i) xr[i] = x + (r + i) * in;
  __m256 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm256_setzero_ps();
  const bool ahead = o + 2 * T <= w.out;  // prefetch the next T columns, one line per 32 inputs
  int64_t k = 0;
  for (; k + 8 <= in; k += 8) {
    if (ahead && k % 32 == 0)
      for (int t = 0; t < T; ++t) prefetch(wr[t] + T * in + k);
    __m256 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm256_loadu_ps(xr[i] + k);
    for (int t = 0; t < T; ++t) {
      const __m256 wv = bf16x8(wr[t] + k);
      for (int i = 0; i < R; ++i) acc[t][i] = _mm256_fmadd_ps(wv, xv[i], acc[t][i]);
    }
  }
  if (k < in) {
    alignas(32) float xt[R][8] = {};
    alignas(32) uint16_t wt[T][8] = {};
    for (int i = 0; i < R; ++i) std::memcpy(xt[i], xr[i] + k, (in - k) * sizeof(float));
    for (int t = 0; t < T; ++t) std::memcpy(wt[t], wr[t] + k, (in - k) * sizeof(uint16_t));
    for (int t = 0; t < T; ++t) {
      const __m256 wv = bf16x8(wt[t]);
      for (int i = 0; i < R; ++i) acc[t][i] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt[i]), acc[t][i]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) y[(r + i) * w.out + o + t] = reduce(acc[t][i]);
}

// Many rows, as for NVFP4: T columns are widened once per chunk of kChunk inputs into L1 and used
// by every row of a block, two rows at a time; each accumulator sees the same FMAs in the same
// order as in bf16_tile (the tail step through the same zero-padded lanes), so the bits match.
constexpr int64_t kChunk = 512;

template <int T>
DRAMA_AVX2 void bf16_row_block(const LinearWeight& w, const float* x, int64_t o, int64_t r0,
                               int64_t nr, float* y) {
  const int64_t in = w.in;
  const uint16_t* wr[T];
  for (int t = 0; t < T; ++t) wr[t] = static_cast<const uint16_t*>(w.data) + (o + t) * in;
  __m256 acc[kRowBlock][T];
  for (int64_t i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  alignas(32) float wf[T][kChunk];
  const bool ahead = o + 2 * T <= w.out;
  for (int64_t k0 = 0; k0 < in; k0 += kChunk) {
    const int64_t n = std::min(kChunk, in - k0), full = n / 8 * 8;
    for (int t = 0; t < T; ++t) {
      for (int64_t k = 0; k < full; k += 8) {
        if (ahead && k % 32 == 0) prefetch(wr[t] + T * in + k0 + k);
        _mm256_store_ps(wf[t] + k, bf16x8(wr[t] + k0 + k));
      }
      if (full < n) {
        alignas(32) uint16_t wt[8] = {};
        std::memcpy(wt, wr[t] + k0 + full, (n - full) * sizeof(uint16_t));
        _mm256_store_ps(wf[t] + full, bf16x8(wt));
      }
    }
    int64_t i = 0;
    for (; i + 2 <= nr; i += 2) {
      const float* x0 = x + (r0 + i) * in + k0;
      const float* x1 = x0 + in;
      __m256 a[T][2];
      for (int t = 0; t < T; ++t) {
        a[t][0] = acc[i][t];
        a[t][1] = acc[i + 1][t];
      }
      for (int64_t k = 0; k < full; k += 8) {
        const __m256 xv0 = _mm256_loadu_ps(x0 + k), xv1 = _mm256_loadu_ps(x1 + k);
        for (int t = 0; t < T; ++t) {
          const __m256 wv = _mm256_load_ps(wf[t] + k);
          a[t][0] = _mm256_fmadd_ps(wv, xv0, a[t][0]);
          a[t][1] = _mm256_fmadd_ps(wv, xv1, a[t][1]);
        }
      }
      if (full < n) {
        alignas(32) float xt[2][8] = {};
        std::memcpy(xt[0], x0 + full, (n - full) * sizeof(float));
        std::memcpy(xt[1], x1 + full, (n - full) * sizeof(float));
        for (int t = 0; t < T; ++t) {
          const __m256 wv = _mm256_load_ps(wf[t] + full);
          a[t][0] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt[0]), a[t][0]);
          a[t][1] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt[1]), a[t][1]);
        }
      }
      for (int t = 0; t < T; ++t) {
        acc[i][t] = a[t][0];
        acc[i + 1][t] = a[t][1];
      }
    }
    if (i < nr) {
      const float* x0 = x + (r0 + i) * in + k0;
      __m256 a[T];
      for (int t = 0; t < T; ++t) a[t] = acc[i][t];
      for (int64_t k = 0; k < full; k += 8) {
        const __m256 xv0 = _mm256_loadu_ps(x0 + k);
        for (int t = 0; t < T; ++t) a[t] = _mm256_fmadd_ps(_mm256_load_ps(wf[t] + k), xv0, a[t]);
      }
      if (full < n) {
        alignas(32) float xt[8] = {};
        std::memcpy(xt, x0 + full, (n - full) * sizeof(float));
        for (int t = 0; t < T; ++t)
          a[t] = _mm256_fmadd_ps(_mm256_load_ps(wf[t] + full), _mm256_load_ps(xt), a[t]);
      }
      for (int t = 0; t < T; ++t) acc[i][t] = a[t];
    }
  }
  for (int64_t i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) y[(r0 + i) * w.out + o + t] = reduce(acc[i][t]);
}

template <int T>
DRAMA_AVX2 void bf16_columns(const LinearWeight& w, const float* x, int64_t rows, int64_t o,
                             float* y) {
  if (rows >= kDecodeOnceRows) {
    for (int64_t r = 0; r < rows; r += kRowBlock)
      bf16_row_block<T>(w, x, o, r, std::min(kRowBlock, rows - r), y);
    return;
  }
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) bf16_tile<T, 2>(w, x, o, r, y);
  if (r < rows) bf16_tile<T, 1>(w, x, o, r, y);
}

}  // namespace

int64_t nvfp4_prepared_floats_avx2(int64_t in) {
  return (in + kGroup - 1) / kGroup * kGroup;
}

// Group g, step p, lane 2q + h holds input 64g + 16q + 8h + p (code p or p+8 of block q).
void nvfp4_prepare_x_avx2(const float* x, int64_t rows, int64_t in, float* xp) {
  const int64_t stride = nvfp4_prepared_floats_avx2(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    float* d = xp + r * stride;
    std::memset(d, 0, sizeof(float) * stride);
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = i / kGroup, j = i % kGroup, q = j / 16, h = (j % 16) / 8, p = j % 8;
      d[g * kGroup + p * 8 + 2 * q + h] = xr[i];
    }
  }
}

DRAMA_AVX2 void nvfp4_linear_avx2(const LinearWeight& w, const float* xp, int64_t rows, float* y,
                                  int64_t o0, int64_t o1) {
  const int64_t stride = nvfp4_prepared_floats_avx2(w.in);
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4) nvfp4_columns<4>(w, xp, stride, rows, o, y);
  for (; o < o1; ++o) nvfp4_columns<1>(w, xp, stride, rows, o, y);
}

DRAMA_AVX2 void bf16_linear_avx2(const LinearWeight& w, const float* x, int64_t rows, float* y,
                                 int64_t o0, int64_t o1) {
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4) bf16_columns<4>(w, x, rows, o, y);
  for (; o < o1; ++o) bf16_columns<1>(w, x, rows, o, y);
}

}  // namespace drama::cpu

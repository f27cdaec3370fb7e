// AVX-512 matrix products. NVFP4 (W4A16) needs AVX512_BF16 (Zen 4+, Sapphire Rapids+; other
// AVX-512 CPUs run the AVX2 NVFP4 kernel). It works on chunks of 64 inputs (32 code bytes, 4
// blocks) of a column: the bytes are widened to 16-bit words and vpermw maps each nibble (the low
// one directly, the high one after a 4-bit shift) through a 16-entry table to its e2m1 value in
// bfloat16, which is exact. Activations are prepared once per call as a pair of bfloat16 (hi, lo)
// with x = hi + lo to 16 significant bits (relative error <= 2^-18, exact for integers below
// 2^16); vdpbf16ps multiplies 32 weights by 32 activation words into 16 float lanes, each lane
// summing products of one block only. Four such products (even/odd inputs, hi/lo) give a chunk's
// unscaled per-block sums, and one FMA with the 4 block scales (each repeated over its 4 lanes)
// adds them to the accumulator. Four columns share every activation load and two rows share every
// decode; each (row, column) accumulator sees the same operation sequence whatever the tile, so
// results are batch invariant. BF16 widens weights to f32 by a shift (activations stay f32) and
// uses FMA.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/linear.h"
#include "util/dtype.h"

#define DRAMA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define DRAMA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace drama::cpu {
namespace {

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

constexpr int64_t kChunk = 64;  // inputs per chunk: 32 code bytes, 4 blocks

// e2m1 codes as bfloat16 bits, twice: vpermw reads 5 index bits and the fifth (a bit of the
// neighbouring nibble) must not matter.
alignas(64) constexpr uint16_t kE2m1Bf16[32] = {
    0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80,
    0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0, 0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040,
    0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0};

// 16 e4m3 bytes to float, exactly: the 7 magnitude bits placed under the f32 exponent/mantissa
// and multiplied by 2^(127-7) (subnormals included); 0x7f is NaN.
DRAMA_AVX512_BF16 inline __m512 e4m3_to_ps(__m128i bytes) {
  const __m512i b = _mm512_cvtepu8_epi32(bytes);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
  const __m512 f =
      _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1.0p120f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  const __m512 r = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
  return _mm512_mask_mov_ps(r, nan, _mm512_set1_ps(__builtin_nanf("")));
}

// Lane sums of four accumulators at once, in one fixed order per accumulator: the four 128-bit
// quarters as (q0 + q2) + (q1 + q3), then within the quarter (l0 + l1) + (l2 + l3). Lane k < 4 of
// the result is the sum of a[k]. A tile of one column passes its accumulator four times, so a
// column's bits never depend on the tile (and so the thread split) it lands in. Cheaper than four
// horizontal reductions, which cost short columns (expert projections) up to 12% of their time.
DRAMA_AVX512 inline __m128 sum_lanes4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xee));
  const __m512 s23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xee));
  // Quarter k of q holds a[k]'s (q0 + q2) + (q1 + q3), lane by lane.
  const __m512 q =
      _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xdd));
  const __m512 pairs = _mm512_add_ps(q, _mm512_permute_ps(q, 0xb1));          // l0+l1, l2+l3
  const __m512 total = _mm512_add_ps(pairs, _mm512_permute_ps(pairs, 0x4e));  // lane 0 of each
  return _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, total));
}

// y[row i, columns o .. o+T) = lane sums of acc[t][i] (times `scale`), T = 4 or 1.
template <int T, int R>
DRAMA_AVX512 inline void store_sums(const __m512 (&acc)[T][R], float scale, float* y, int64_t r,
                                    int64_t out, int64_t o) {
  static_assert(T == 4 || T == 1);
  for (int i = 0; i < R; ++i) {
    const __m512 a0 = acc[0][i], a1 = acc[T == 4 ? 1 : 0][i], a2 = acc[T == 4 ? 2 : 0][i],
                 a3 = acc[T == 4 ? 3 : 0][i];
    const __m128 v = _mm_mul_ps(sum_lanes4(a0, a1, a2, a3), _mm_set1_ps(scale));
    float* dst = y + (r + i) * out + o;
    if constexpr (T == 4)
      _mm_storeu_ps(dst, v);
    else
      *dst = _mm_cvtss_f32(v);
  }
}

// Lane i of chunk q's scale vector is block 4q + i/4 of the 16 in `scales`.
DRAMA_AVX512_BF16 inline __m512 chunk_scales(__m512 scales, int q) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i block = _mm512_add_epi32(_mm512_srli_epi32(lane, 2), _mm512_set1_epi32(4 * q));
  return _mm512_permutexvar_ps(block, scales);
}

// One chunk of T columns x R rows: codes[t] the chunk's 32 code bytes of column t, scale[t] its
// 4 block scales laid out per lane, x[r] the chunk's 4 prepared activation vectors.
template <int T, int R>
DRAMA_AVX512_BF16 inline __attribute__((always_inline)) void nvfp4_chunk(
    const uint8_t* const (&codes)[T], const __m512 (&scale)[T], const uint16_t* const (&x)[R],
    __m512i table, __m512 (&acc)[T][R]) {
  __m512bh xv[R][4];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 4; ++v) xv[i][v] = (__m512bh)_mm512_loadu_si512(x[i] + v * 32);
  for (int t = 0; t < T; ++t) {
    const __m512i w16 =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[t])));
    const auto even = (__m512bh)_mm512_permutexvar_epi16(w16, table);
    const auto odd = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w16, 4), table);
    for (int i = 0; i < R; ++i) {
      __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), even, xv[i][0]);
      p = _mm512_dpbf16_ps(p, even, xv[i][1]);
      p = _mm512_dpbf16_ps(p, odd, xv[i][2]);
      p = _mm512_dpbf16_ps(p, odd, xv[i][3]);
      acc[t][i] = _mm512_fmadd_ps(p, scale[t], acc[t][i]);
    }
  }
}

// T output columns x R rows over all inputs, 16 blocks (4 chunks) per scale load; the last
// partial step reads codes and scales with masked loads (missing blocks have zero weights, zero
// scales and zero prepared activations).
template <int T, int R>
DRAMA_AVX512_BF16 void nvfp4_tile(const LinearWeight& w, const uint16_t* xp, int64_t xp_stride,
                                  int64_t o, int64_t r, float* y) {
  const int64_t in = w.in, blocks = in / 16;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const uint8_t* c[T];
  const uint8_t* s[T];
  for (int t = 0; t < T; ++t) {
    c[t] = codes + (o + t) * (in / 2);
    s[t] = w.scales + (o + t) * blocks;
  }
  const uint16_t* x[R];
  for (int i = 0; i < R; ++i) x[i] = xp + (r + i) * xp_stride;
  const __m512i table = _mm512_load_si512(kE2m1Bf16);
  __m512 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm512_setzero_ps();
  // Columns ahead are prefetched while these are computed: a column of a small matrix is too
  // short a stream for the hardware prefetcher to ramp up (1.6-2.3x on expert shapes). The
  // distance is the next T columns, or as many tiles more as make it at least 4 KiB of codes
  // (about memory latency times bandwidth here): one tile of short columns (in = 512) passed in
  // less time than a miss takes, and prefetching 4 KiB ahead made those 11% (one row) and 7%
  // (two rows) faster (docs/cpu-backend.md).
  const int64_t skip = T * std::max<int64_t>(1, 4096 / (T * in / 2));
  const bool ahead = o + skip + T <= w.out;
  int64_t b0 = 0;
  for (; b0 + 16 <= blocks; b0 += 16) {
    if (ahead)
      for (int t = 0; t < T; ++t) {
        prefetch(c[t] + skip * (in / 2) + b0 * 8);
        prefetch(c[t] + skip * (in / 2) + b0 * 8 + 64);
        if (b0 % 64 == 0) prefetch(s[t] + skip * blocks + b0);
      }
    __m512 sc[T];
    for (int t = 0; t < T; ++t)
      sc[t] = e4m3_to_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s[t] + b0)));
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const uint8_t* cq[T];
      __m512 scq[T];
      for (int t = 0; t < T; ++t) {
        cq[t] = c[t] + (b0 + 4 * q) * 8;
        scq[t] = chunk_scales(sc[t], q);
      }
      const uint16_t* xq[R];
      for (int i = 0; i < R; ++i) xq[i] = x[i] + (b0 + 4 * q) * 32;
      nvfp4_chunk<T, R>(cq, scq, xq, table, acc);
    }
  }
  if (b0 < blocks) {
    const int64_t nb = blocks - b0;
    __m512 sc[T];
    for (int t = 0; t < T; ++t)
      sc[t] = e4m3_to_ps(_mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nb) - 1), s[t] + b0));
    for (int q = 0; 4 * q < nb; ++q) {
      const int64_t in_chunk = std::min<int64_t>(4, nb - 4 * q);
      const auto m = static_cast<__mmask32>((uint64_t{1} << (8 * in_chunk)) - 1);
      alignas(32) uint8_t tail[T][32];
      const uint8_t* cq[T];
      __m512 scq[T];
      for (int t = 0; t < T; ++t) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(tail[t]),
                           _mm256_maskz_loadu_epi8(m, c[t] + (b0 + 4 * q) * 8));
        cq[t] = tail[t];
        scq[t] = chunk_scales(sc[t], q);
      }
      const uint16_t* xq[R];
      for (int i = 0; i < R; ++i) xq[i] = x[i] + (b0 + 4 * q) * 32;
      nvfp4_chunk<T, R>(cq, scq, xq, table, acc);
    }
  }
  store_sums<T, R>(acc, w.scale2, y, r, w.out, o);
}

template <int T>
DRAMA_AVX512_BF16 void nvfp4_columns(const LinearWeight& w, const uint16_t* xp, int64_t xp_stride,
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
  const bool ahead = o + 2 * T <= w.out;  // prefetch the next T columns, as nvfp4_tile does
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    if (ahead && k % 32 == 0)
      for (int t = 0; t < T; ++t) prefetch(wr[t] + T * in + k);
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
  store_sums<T, R>(acc, 1.0f, y, r, w.out, o);
}

template <int T>
DRAMA_AVX512 void bf16_columns(const LinearWeight& w, const float* x, int64_t rows, int64_t o,
                               float* y) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) bf16_tile<T, 2>(w, x, o, r, y);
  if (r < rows) bf16_tile<T, 1>(w, x, o, r, y);
}

}  // namespace

bool nvfp4_avx512_supported() {
  return __builtin_cpu_supports("avx512bf16");
}

int64_t nvfp4_prepared_floats_avx512(int64_t in) {
  return (in + kChunk - 1) / kChunk * kChunk;  // 2 words (hi, lo) per input
}

// f32_to_bf16 (round to nearest even, NaN kept quiet) on 16 lanes, the result in each lane's low
// 16 bits: the same integer steps as the scalar helper, so the bits are identical (vcvtneps2bf16
// would flush denormal inputs to zero).
DRAMA_AVX512_BF16 inline __m512i bf16_bits(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i bias =
      _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
}

// Chunk c of a row is 4 vectors of 32 words: even-input hi, even-input lo, odd-input hi, odd-input
// lo. Word 2i + e of an even vector holds input 64c + 4i + 2e, of an odd vector 64c + 4i + 2e + 1:
// the inputs of code bytes 2i and 2i+1, matching vpermw's word order and vdpbf16ps's pairs. So
// word w of an even vector is input 64c + 2w, of an odd one 64c + 2w + 1; inputs past `in` are 0.
DRAMA_AVX512_BF16 void nvfp4_prepare_x_avx512(const float* x, int64_t rows, int64_t in,
                                              float* xp_floats) {
  const int64_t stride = 2 * nvfp4_prepared_floats_avx512(in);  // in words
  auto* xp = reinterpret_cast<uint16_t*>(xp_floats);
  __m512i even_idx, odd_idx;  // word 2w (2w + 1) of the 64 words of two vectors
  {
    alignas(64) uint16_t e[32], o[32];
    for (int w = 0; w < 32; ++w) {
      e[w] = static_cast<uint16_t>(2 * w);
      o[w] = static_cast<uint16_t>(2 * w + 1);
    }
    even_idx = _mm512_load_si512(e);
    odd_idx = _mm512_load_si512(o);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    uint16_t* d = xp + r * stride;
    for (int64_t c = 0; c * kChunk < in; ++c) {
      __m256i hi[4], lo[4];
      for (int v = 0; v < 4; ++v) {
        const int64_t first = c * kChunk + 16 * v;
        const int64_t n = std::clamp<int64_t>(in - first, 0, 16);
        const __m512 f = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), xr + first);
        const __m512i h = bf16_bits(f);
        const __m512 rest = _mm512_sub_ps(f, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
        hi[v] = _mm512_cvtepi32_epi16(h);
        lo[v] = _mm512_cvtepi32_epi16(bf16_bits(rest));
      }
      const __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(hi[0]), hi[1], 1);
      const __m512i h23 = _mm512_inserti64x4(_mm512_castsi256_si512(hi[2]), hi[3], 1);
      const __m512i l01 = _mm512_inserti64x4(_mm512_castsi256_si512(lo[0]), lo[1], 1);
      const __m512i l23 = _mm512_inserti64x4(_mm512_castsi256_si512(lo[2]), lo[3], 1);
      uint16_t* v = d + c * 128;
      _mm512_storeu_si512(v, _mm512_permutex2var_epi16(h01, even_idx, h23));
      _mm512_storeu_si512(v + 32, _mm512_permutex2var_epi16(l01, even_idx, l23));
      _mm512_storeu_si512(v + 64, _mm512_permutex2var_epi16(h01, odd_idx, h23));
      _mm512_storeu_si512(v + 96, _mm512_permutex2var_epi16(l01, odd_idx, l23));
    }
  }
}

DRAMA_AVX512_BF16 void nvfp4_linear_avx512(const LinearWeight& w, const float* xp_floats,
                                           int64_t rows, float* y, int64_t o0, int64_t o1) {
  const int64_t stride = 2 * nvfp4_prepared_floats_avx512(w.in);
  const auto* xp = reinterpret_cast<const uint16_t*>(xp_floats);
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

// AVX-512 matrix products. NVFP4 (W4A16) needs AVX512_BF16 and AVX512_VBMI (Zen 4+, Sapphire
// Rapids+; other AVX-512 CPUs run the AVX2 NVFP4 kernel). It works on super-chunks of 16 blocks
// (256 inputs, 128 code bytes) of a column, with one block per float lane: in each of the four
// chunks of a super-chunk, vpermi2b picks two code bytes of every block (bytes 2q, 2q+1 of block i
// into words 2i, 2i+1, zero-extended) and vpermw maps each nibble (the low one directly, the high
// one after a 4-bit shift) through a 16-entry table to its e2m1 value in bfloat16, which is exact.
// Activations are prepared once per call as a pair of bfloat16 (hi, lo) with x = hi + lo to 16
// significant bits (relative error <= 2^-17, 2^-18.7 rms; exact for integers below 2^16), in the
// same order; vdpbf16ps multiplies 32 weights by 32 activation words into 16 float lanes, so lane i
// sums the products of block i only. Sixteen products (four chunks of even/odd inputs, hi/lo) give
// each block's unscaled sum, and one FMA with the 16 block scales adds them to the accumulator: no
// per-chunk scale shuffle. Eight columns share every activation load and two rows share every
// decode; each (row, column) accumulator sees the same operation sequence whatever the tile, so
// results are batch invariant. BF16 widens weights to f32 by a shift (activations stay f32) and
// uses FMA, in tiles of 4 columns x 4 rows (then row pairs, then one row): every widened weight
// vector serves four rows, which took the cpu-bench 4-lane paired decode step from 52.8-57.2 to
// 49.5-49.8 ms on one Zen 5 thread (docs/cpu-backend.md).
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
#define DRAMA_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace drama::cpu {
namespace {

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

constexpr int64_t kSuper = 256;  // inputs per super-chunk: 16 blocks, 128 code bytes

// vpermi2b indices of chunk q (bytes of the zero-extended words): word 2i + e <- code byte
// 8i + 2q + e of the super-chunk (block i's bytes 2q, 2q+1); the odd bytes are masked to zero.
struct ByteIndex {
  alignas(64) uint8_t q[4][64];
};
constexpr ByteIndex make_byte_index() {
  ByteIndex t{};
  for (int q = 0; q < 4; ++q)
    for (int w = 0; w < 32; ++w) t.q[q][2 * w] = static_cast<uint8_t>(8 * (w / 2) + 2 * q + w % 2);
  return t;
}
constexpr ByteIndex kByteIndex = make_byte_index();

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

// y[row i, columns o .. o+T) = lane sums of acc[t][i] (times `scale`), T a multiple of 4 or 1.
template <int T, int R>
DRAMA_AVX512 inline void store_sums(const __m512 (&acc)[T][R], float scale, float* y, int64_t r,
                                    int64_t out, int64_t o) {
  static_assert(T % 4 == 0 || T == 1);
  for (int i = 0; i < R; ++i)
    for (int g = 0; g < (T == 1 ? 1 : T / 4); ++g) {
      const int t0 = T == 1 ? 0 : 4 * g, step = T == 1 ? 0 : 1;
      const __m128 v = _mm_mul_ps(
          sum_lanes4(acc[t0][i], acc[t0 + step][i], acc[t0 + 2 * step][i], acc[t0 + 3 * step][i]),
          _mm_set1_ps(scale));
      float* dst = y + (r + i) * out + o + 4 * g;
      if constexpr (T == 1)
        *dst = _mm_cvtss_f32(v);
      else
        _mm_storeu_ps(dst, v);
    }
}

// One super-chunk (16 blocks from block b0; nb < 16 only for the last, whose missing blocks get
// zero codes and scales from masked loads, and zero prepared activations) of T columns x R rows.
template <int T, int R, bool Tail>
DRAMA_AVX512_BF16 inline __attribute__((always_inline)) void nvfp4_super(
    const uint8_t* const (&c)[T], const uint8_t* const (&s)[T], const uint16_t* const (&x)[R],
    int64_t b0, int64_t nb, __m512i table, __m512 (&acc)[T][R]) {
  const int64_t bytes = 8 * nb;
  const __mmask64 m0 = !Tail || bytes >= 64 ? ~0ull : (1ull << bytes) - 1;
  const __mmask64 m1 = !Tail ? ~0ull : bytes > 64 ? (1ull << (bytes - 64)) - 1 : 0;
  __m512 p[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) p[t][i] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    __m512bh xv[R][4];
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < 4; ++v)
        xv[i][v] = (__m512bh)_mm512_loadu_si512(x[i] + b0 * 32 + q * 128 + v * 32);
    const __m512i idx = _mm512_load_si512(kByteIndex.q[q]);
    for (int t = 0; t < T; ++t) {
      const uint8_t* cb = c[t] + b0 * 8;
      const __m512i lo = Tail ? _mm512_maskz_loadu_epi8(m0, cb) : _mm512_loadu_si512(cb);
      const __m512i hi = Tail ? _mm512_maskz_loadu_epi8(m1, cb + 64) : _mm512_loadu_si512(cb + 64);
      const __m512i w16 = _mm512_maskz_permutex2var_epi8(0x5555555555555555ull, lo, idx, hi);
      const auto even = (__m512bh)_mm512_permutexvar_epi16(w16, table);
      const auto odd = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w16, 4), table);
      for (int i = 0; i < R; ++i) {
        p[t][i] = _mm512_dpbf16_ps(p[t][i], even, xv[i][0]);
        p[t][i] = _mm512_dpbf16_ps(p[t][i], even, xv[i][1]);
        p[t][i] = _mm512_dpbf16_ps(p[t][i], odd, xv[i][2]);
        p[t][i] = _mm512_dpbf16_ps(p[t][i], odd, xv[i][3]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m128i sb = Tail
                           ? _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nb) - 1), s[t] + b0)
                           : _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[t] + b0));
    const __m512 sc = e4m3_to_ps(sb);
    for (int i = 0; i < R; ++i) acc[t][i] = _mm512_fmadd_ps(p[t][i], sc, acc[t][i]);
  }
}

// T output columns x R rows over all inputs.
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
  // Codes 4 KiB ahead in the order this thread reads them (the tile's columns super-chunk by
  // super-chunk, then the next tile's) are prefetched while these are computed: the hardware
  // prefetchers contribute little on the VM measured (one sequential stream without software
  // prefetch read 8.5 GB/s), and about latency times bandwidth ahead keeps enough misses in
  // flight. For short columns (in = 512) that is two tiles ahead; for long ones it is within the
  // tile: at 4096 x 14336 two rows this took 1.89-2.19 ms to 1.73-1.98 ms against prefetching the
  // next tile (57 KiB ahead), and short expert columns did not change (docs/cpu-backend.md).
  const int64_t ahead = 16 * std::max<int64_t>(1, 4096 / (T * 128));  // blocks
  int64_t col = ahead / blocks * T, ab = ahead % blocks;  // prefetch: col columns on, block ab
  int64_t b0 = 0;
  for (; b0 + 16 <= blocks; b0 += 16, ab += 16) {
    if (ab >= blocks) {
      ab -= blocks;
      col += T;
    }
    if (o + col + T <= w.out)
      for (int t = 0; t < T; ++t) {
        const uint8_t* cp = c[t] + col * (in / 2) + ab * 8;
        prefetch(cp);
        prefetch(cp + 64);
        if (ab % 64 < 16) prefetch(s[t] + col * blocks + ab);
      }
    nvfp4_super<T, R, false>(c, s, x, b0, 16, table, acc);
  }
  if (b0 < blocks) nvfp4_super<T, R, true>(c, s, x, b0, blocks - b0, table, acc);
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
  for (; r + 4 <= rows; r += 4) bf16_tile<T, 4>(w, x, o, r, y);
  for (; r + 2 <= rows; r += 2) bf16_tile<T, 2>(w, x, o, r, y);
  if (r < rows) bf16_tile<T, 1>(w, x, o, r, y);
}

}  // namespace

bool nvfp4_avx512_supported() {
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
}

int64_t nvfp4_prepared_floats_avx512(int64_t in) {
  return (in + kSuper - 1) / kSuper * kSuper;  // 2 words (hi, lo) per input
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

// Qword q (words 4q .. 4q+3) of the 16 blocks of a super-chunk, blocks 0-7 in a and 8-15 in b,
// from v[k] = words of inputs 32k .. 32k+31 (blocks 2k, 2k+1; qword 4j + q of v[k] is qword q of
// block 2k + j): a 16 x 4 transpose of qwords in two permute stages.
DRAMA_AVX512_BF16 inline void gather_qwords(const __m512i (&v)[8], __m512i (&a)[4],
                                            __m512i (&b)[4]) {
  // Stage 1: s[m][h] = qwords 2h and 2h+1 of blocks 4m .. 4m+3 (lane l: qword 2h + l/4 of block
  // 4m + l%4, which is qword (l%4 / 2) * 8 + (l%4 % 2) * 4 + 2h + l/4 of v[2m] : v[2m+1]).
  const __m512i lo_idx = _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i hi_idx = _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2);
  __m512i s[4][2];
  for (int m = 0; m < 4; ++m) {
    s[m][0] = _mm512_permutex2var_epi64(v[2 * m], lo_idx, v[2 * m + 1]);
    s[m][1] = _mm512_permutex2var_epi64(v[2 * m], hi_idx, v[2 * m + 1]);
  }
  // Stage 2: qword q of blocks 0-3 is 256-bit half q%2 of s[0][q/2], of blocks 4-7 the same half
  // of s[1][q/2]; likewise s[2], s[3] for blocks 8-15.
  a[0] = _mm512_shuffle_i64x2(s[0][0], s[1][0], 0x44);
  a[1] = _mm512_shuffle_i64x2(s[0][0], s[1][0], 0xee);
  a[2] = _mm512_shuffle_i64x2(s[0][1], s[1][1], 0x44);
  a[3] = _mm512_shuffle_i64x2(s[0][1], s[1][1], 0xee);
  b[0] = _mm512_shuffle_i64x2(s[2][0], s[3][0], 0x44);
  b[1] = _mm512_shuffle_i64x2(s[2][0], s[3][0], 0xee);
  b[2] = _mm512_shuffle_i64x2(s[2][1], s[3][1], 0x44);
  b[3] = _mm512_shuffle_i64x2(s[2][1], s[3][1], 0xee);
}

// Super-chunk s of a row is 4 chunks of 4 vectors of 32 words: even-input hi, even-input lo,
// odd-input hi, odd-input lo. Word 2i + e of chunk q's even vector holds input 256s + 16i + 4q +
// 2e, of its odd vector input 256s + 16i + 4q + 2e + 1: block i's inputs whose code bytes 2q, 2q+1
// the kernel widens into words 2i, 2i+1. Inputs past `in` are 0.
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
    for (int64_t sc = 0; sc * kSuper < in; ++sc) {
      __m512i hi[8], lo[8];  // words of inputs 32k .. 32k+31 of the super-chunk
      for (int k = 0; k < 8; ++k) {
        __m256i h[2], l[2];
        for (int half = 0; half < 2; ++half) {
          const int64_t first = sc * kSuper + 32 * k + 16 * half;
          const int64_t n = std::clamp<int64_t>(in - first, 0, 16);
          const __m512 f = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), xr + first);
          const __m512i hb = bf16_bits(f);
          const __m512 rest = _mm512_sub_ps(f, _mm512_castsi512_ps(_mm512_slli_epi32(hb, 16)));
          h[half] = _mm512_cvtepi32_epi16(hb);
          l[half] = _mm512_cvtepi32_epi16(bf16_bits(rest));
        }
        hi[k] = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
        lo[k] = _mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1);
      }
      __m512i ha[4], hb[4], la[4], lb[4];
      gather_qwords(hi, ha, hb);
      gather_qwords(lo, la, lb);
      uint16_t* v = d + sc * 2 * kSuper;
      for (int q = 0; q < 4; ++q, v += 128) {
        // Qword q of block i holds inputs 16i + 4q .. 16i + 4q + 3: words 0 and 2 are the even
        // inputs of word pair (2i, 2i+1), words 1 and 3 the odd ones.
        _mm512_storeu_si512(v, _mm512_permutex2var_epi16(ha[q], even_idx, hb[q]));
        _mm512_storeu_si512(v + 32, _mm512_permutex2var_epi16(la[q], even_idx, lb[q]));
        _mm512_storeu_si512(v + 64, _mm512_permutex2var_epi16(ha[q], odd_idx, hb[q]));
        _mm512_storeu_si512(v + 96, _mm512_permutex2var_epi16(la[q], odd_idx, lb[q]));
      }
    }
  }
}

DRAMA_AVX512_BF16 void nvfp4_linear_avx512(const LinearWeight& w, const float* xp_floats,
                                           int64_t rows, float* y, int64_t o0, int64_t o1) {
  const int64_t stride = 2 * nvfp4_prepared_floats_avx512(w.in);
  const auto* xp = reinterpret_cast<const uint16_t*>(xp_floats);
  int64_t o = o0;
  for (; o + 8 <= o1; o += 8) nvfp4_columns<8>(w, xp, stride, rows, o, y);
  for (; o < o1; ++o) nvfp4_columns<1>(w, xp, stride, rows, o, y);
}

DRAMA_AVX512 void bf16_linear_avx512(const LinearWeight& w, const float* x, int64_t rows, float* y,
                                     int64_t o0, int64_t o1) {
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4) bf16_columns<4>(w, x, rows, o, y);
  for (; o < o1; ++o) bf16_columns<1>(w, x, rows, o, y);
}

}  // namespace drama::cpu

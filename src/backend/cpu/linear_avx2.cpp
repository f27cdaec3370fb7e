// AVX2 + FMA matrix products, the fallback for CPUs without AVX-512. NVFP4: a group is 4 blocks
// (64 inputs, 32 code bytes); vpshufb maps each code to the high and the low byte of its
// bfloat16 (sign included), the bytes are interleaved into words and widened to floats by a shift
// or a mask, so 64 weights cost 19 integer operations (the vpermps decode before it took 31).
// Block scales come from a 256-entry table of the e4m3 values. Partial sums of two blocks at a
// time are scaled in one FMA. A partial last group is copied into a zeroed buffer. BF16 widens
// weights by a shift and uses FMA. Same tiles and invariance as the AVX-512 path.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/linear.h"
#include "util/dtype.h"

#define DRAMA_AVX2 __attribute__((target("avx2,fma")))

namespace drama::cpu {
namespace {

constexpr int64_t kGroup = 64;  // inputs per group: 4 blocks, 32 code bytes, 4 scales

// e2m1 codes (sign in bit 3) as the high and the low byte of their bfloat16, for vpshufb.
struct ByteTables {
  alignas(32) uint8_t hi[32], lo[32];
};
constexpr ByteTables make_byte_tables() {
  constexpr uint16_t kBf16[8] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0};
  ByteTables t{};
  for (int i = 0; i < 32; ++i) {
    const uint16_t v = static_cast<uint16_t>(kBf16[i & 7] | ((i & 8) ? 0x8000 : 0));
    t.hi[i] = static_cast<uint8_t>(v >> 8);
    t.lo[i] = static_cast<uint8_t>(v);
  }
  return t;
}
constexpr ByteTables kBytes = make_byte_tables();

// Every e4m3 byte as its float (NaN for 0x7f and 0xff), from the scalar definition.
struct ScaleTable {
  float f[256];
  ScaleTable() {
    for (int i = 0; i < 256; ++i) f[i] = e4m3_to_f32(static_cast<uint8_t>(i));
  }
};
const ScaleTable& scale_table() {
  static const ScaleTable t;
  return t;
}

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// One group of one column decoded: w[k] for k = 4u + 2s + e holds, in lane l (d = l % 4,
// h = l / 4), the weight of input 16 (u + 2h) + 4d + 2e + s: s picks the nibble, e the byte of
// a pair, u and h the block. Bytes become bfloat16 through two vpshufb tables, then floats by a
// shift (even words) or a mask (odd words). scale[u] holds the scales of blocks u and u + 2, each
// over the 4 lanes of its half.
struct Decoder {
  __m256i hi, lo, nibble, odd;
  const float* scales;
  DRAMA_AVX2 Decoder()
      : hi(_mm256_load_si256(reinterpret_cast<const __m256i*>(kBytes.hi))),
        lo(_mm256_load_si256(reinterpret_cast<const __m256i*>(kBytes.lo))),
        nibble(_mm256_set1_epi8(0x0f)),
        odd(_mm256_set1_epi32(static_cast<int>(0xffff0000u))),
        scales(scale_table().f) {}

  DRAMA_AVX2 inline __attribute__((always_inline)) void weights(const uint8_t* c,
                                                                __m256 (&w)[8]) const {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    const __m256i n[2] = {_mm256_and_si256(q, nibble),
                          _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble)};
    for (int s = 0; s < 2; ++s) {
      const __m256i h = _mm256_shuffle_epi8(hi, n[s]), l = _mm256_shuffle_epi8(lo, n[s]);
      const __m256i words[2] = {_mm256_unpacklo_epi8(l, h), _mm256_unpackhi_epi8(l, h)};
      for (int u = 0; u < 2; ++u) {
        w[4 * u + 2 * s] = _mm256_castsi256_ps(_mm256_slli_epi32(words[u], 16));
        w[4 * u + 2 * s + 1] = _mm256_castsi256_ps(_mm256_and_si256(words[u], odd));
      }
    }
  }

  DRAMA_AVX2 inline __attribute__((always_inline)) void block_scales(const uint8_t* s,
                                                                     __m256 (&scale)[2]) const {
    for (int u = 0; u < 2; ++u)
      scale[u] =
          _mm256_blend_ps(_mm256_set1_ps(scales[s[u]]), _mm256_set1_ps(scales[s[u + 2]]), 0xf0);
  }
};

// The arithmetic every (row, column) pair sees for one group, in this order on every path: the
// products of the blocks (u, u + 2) summed (the first by a multiplication, then FMAs in k order),
// then one FMA of each sum with its scales into the accumulator, u = 0 first.
DRAMA_AVX2 inline __attribute__((always_inline)) __m256 group_dot(const __m256 (&w)[8],
                                                                  const __m256 (&scale)[2],
                                                                  const float* x, __m256 acc) {
  for (int u = 0; u < 2; ++u) {
    __m256 sum = _mm256_mul_ps(w[4 * u], _mm256_loadu_ps(x + 32 * u));
    for (int k = 1; k < 4; ++k)
      sum = _mm256_fmadd_ps(w[4 * u + k], _mm256_loadu_ps(x + 32 * u + 8 * k), sum);
    acc = _mm256_fmadd_ps(sum, scale[u], acc);
  }
  return acc;
}

DRAMA_AVX2 inline float reduce(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

// The code and scale pointers of T columns' group b0, prefetching the next T columns (one line of
// codes every other group, a line of scales every 64 blocks); a partial last group is copied
// into zeroed buffers.
template <int T>
struct GroupSource {
  const LinearWeight& w;
  int64_t o;
  bool ahead;
  alignas(32) uint8_t tail_codes[T][32] = {}, tail_scales[T][4] = {};
  GroupSource(const LinearWeight& w_, int64_t o_) : w(w_), o(o_), ahead(o_ + 2 * T <= w_.out) {}

  void at(int64_t b0, const uint8_t* (&c)[T], const uint8_t* (&s)[T]) {
    const int64_t in = w.in, blocks = in / 16;
    const auto* codes = static_cast<const uint8_t*>(w.data);
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
      return;
    }
    const int64_t nb = blocks - b0;
    for (int t = 0; t < T; ++t) {
      std::memcpy(tail_codes[t], codes + (o + t) * (in / 2) + b0 * 8, nb * 8);
      std::memcpy(tail_scales[t], w.scales + (o + t) * blocks + b0, nb);
      c[t] = tail_codes[t];
      s[t] = tail_scales[t];
    }
  }
};

// T columns x R rows, each group decoded once per column for the R rows.
template <int T, int R>
DRAMA_AVX2 void nvfp4_tile(const LinearWeight& w, const float* xp, int64_t xp_stride, int64_t o,
                           int64_t r, float* y) {
  const int64_t blocks = w.in / 16;
  const Decoder dec;
  GroupSource<T> src(w, o);
  __m256 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < blocks; b0 += 4) {
    const uint8_t* c[T];
    const uint8_t* s[T];
    src.at(b0, c, s);
    for (int t = 0; t < T; ++t) {
      __m256 wv[8], scale[2];
      dec.weights(c[t], wv);
      dec.block_scales(s[t], scale);
      for (int i = 0; i < R; ++i)
        acc[t][i] = group_dot(wv, scale, xp + (r + i) * xp_stride + b0 * 16, acc[t][i]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) y[(r + i) * w.out + o + t] = reduce(acc[t][i]) * w.scale2;
}

// Many rows (prefill chunks, experts chosen by several rows, several lanes): each group of T
// columns is decoded once into L1 for a block of up to kRowBlock rows, whose accumulators live in
// memory, instead of once per row pair. Every (row, column) accumulator goes through group_dot
// as in nvfp4_tile, so the bits equal the row-pair tiles' and batch invariance holds across the
// two paths.
constexpr int64_t kRowBlock = 16;       // (smaller blocks for long rows measured slower)
constexpr int64_t kDecodeOnceRows = 3;  // from this many rows the decoded block is faster

template <int T>
DRAMA_AVX2 void nvfp4_row_block(const LinearWeight& w, const float* xp, int64_t xp_stride,
                                int64_t o, int64_t r0, int64_t nr, float* y) {
  const int64_t blocks = w.in / 16;
  const Decoder dec;
  GroupSource<T> src(w, o);
  __m256 acc[kRowBlock][T];
  for (int64_t i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  __m256 wv[T][8], scale[T][2];
  for (int64_t b0 = 0; b0 < blocks; b0 += 4) {
    const uint8_t* c[T];
    const uint8_t* s[T];
    src.at(b0, c, s);
    for (int t = 0; t < T; ++t) {
      dec.weights(c[t], wv[t]);
      dec.block_scales(s[t], scale[t]);
    }
    // group_dot's operations for every column, each input vector loaded once for the T columns.
    for (int64_t i = 0; i < nr; ++i) {
      const float* x = xp + (r0 + i) * xp_stride + b0 * 16;
      for (int u = 0; u < 2; ++u) {
        __m256 sum[T];
        const __m256 x0 = _mm256_loadu_ps(x + 32 * u);
        for (int t = 0; t < T; ++t) sum[t] = _mm256_mul_ps(wv[t][4 * u], x0);
        for (int k = 1; k < 4; ++k) {
          const __m256 xk = _mm256_loadu_ps(x + 32 * u + 8 * k);
          for (int t = 0; t < T; ++t) sum[t] = _mm256_fmadd_ps(wv[t][4 * u + k], xk, sum[t]);
        }
        for (int t = 0; t < T; ++t) acc[i][t] = _mm256_fmadd_ps(sum[t], scale[t][u], acc[i][t]);
      }
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

// Group g, vector k = 4u + 2s + e, lane l = 4h + d holds input 64g + 16(u + 2h) + 4d + 2e + s
// (Decoder::weights's order): kSlot[j] is where input j of a group goes.
struct GroupSlots {
  uint8_t slot[kGroup];
};
constexpr GroupSlots make_group_slots() {
  GroupSlots t{};
  for (int j = 0; j < kGroup; ++j) {
    const int block = j / 16, u = block % 2, h = block / 2, s = j % 2, e = (j / 2) % 2;
    t.slot[j] = static_cast<uint8_t>((4 * u + 2 * s + e) * 8 + 4 * h + (j % 16) / 4);
  }
  return t;
}
constexpr GroupSlots kSlots = make_group_slots();

void nvfp4_prepare_x_avx2(const float* x, int64_t rows, int64_t in, float* xp) {
  const int64_t stride = nvfp4_prepared_floats_avx2(in), full = in / kGroup * kGroup;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    float* d = xp + r * stride;
    for (int64_t g = 0; g < full; g += kGroup)
      for (int j = 0; j < kGroup; ++j) d[g + kSlots.slot[j]] = xr[g + j];
    if (full < in) {
      std::memset(d + full, 0, sizeof(float) * kGroup);
      for (int64_t j = 0; j < in - full; ++j) d[full + kSlots.slot[j]] = xr[full + j];
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

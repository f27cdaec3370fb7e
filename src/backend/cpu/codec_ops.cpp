// Codec (Mimi) kernels: convolutions, activations, LayerNorm, layer scale, vector quantizer
// (spec section 7). Threads split output channels or rows.
//
// Convolutions: the scalar loops are the oracle. Every output element is reduced in ONE order,
// bias first, then input channel c ascending and, within c, kernel tap j ascending (conv1d) or
// input step t ascending (conv_transpose1d), each term as a rounded product then a rounded add
// (no FMA). The SIMD paths (AVX-512: 16 lanes, AVX2: 8 lanes, GCC/Clang vector extensions in
// target-attributed functions) put independent OUTPUT elements in the lanes and apply exactly
// that sequence to every lane, so they are bitwise equal to the scalar loops, whatever the tile,
// the input length or the thread count:
// - conv1d, stride 1, out_len >= lanes: lanes over output steps, tiles of 4 (or 2, 1) output
//   channels x 4 (or 8) vectors; ragged ends by the scalar loop (same order).
// - conv1d, out_len < lanes (the per-frame first decoder conv: 2 steps): lanes over output
//   channels, any stride; AVX-512 transposes 16 x 16 weight blocks in registers, AVX2 gathers.
// - conv_transpose1d with a short output (the first decoder upsampling: 3 inputs, 32 outputs),
//   AVX-512 only: lanes over output steps, the weight row permuted into place per input step.
// - conv_transpose1d otherwise: polyphase, lanes over q for the outputs u = q * stride + r of one
//   phase r: y[u] = b + sum_c sum_{m = M-1 .. 0} x[c][q - m] w[c][o][r + m * stride] (t = q - m
//   ascending); the input is copied once per call into a zero-padded buffer and lanes whose t is
//   outside the input skip the term by a select (exactly as the scalar loop, which never adds it).
// ELU: float64 expm1 on lanes, within the contract's bound but not bitwise equal to std::expm1.
// The SIMD helpers below pass vectors only between always-inline functions inside
// target-attributed ones, so GCC's note that such arguments change the ABI does not apply.
// GCC 12's AVX-512 headers use _mm512_undefined_*() placeholders that trip -Wuninitialized when
// inlined into target-attributed functions (as in linear_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#pragma clang diagnostic ignored "-Wpsabi"
#else
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>

#include "backend/cpu/cpu_backend.h"

namespace drama::cpu {

namespace {

#define DRAMA_INLINE inline __attribute__((always_inline))

template <int W>
struct Lanes {
  typedef float F __attribute__((vector_size(W * 4)));
  typedef int32_t I __attribute__((vector_size(W * 4)));
  typedef double D __attribute__((vector_size(W * 8)));
  typedef int64_t L __attribute__((vector_size(W * 8)));
};

template <class F>
DRAMA_INLINE F loadu(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// m ? a : b per lane (m all ones or all zeros per lane).
template <class M, class V>
DRAMA_INLINE V blend(M m, V a, V b) {
  return (V)(((M)a & m) | ((M)b & ~m));
}

template <class D>
DRAMA_INLINE D splat_d(double v) {
  return v - D{};
}

template <class F>
DRAMA_INLINE F splat(float v) {
  return v - F{};  // v - (+0) is v exactly, -0 included
}

// conv1d, stride 1: y[o0 + ob][t0 .. t0 + TV * W) for OB output channels of one group.
template <int W, int OB, int TV>
DRAMA_INLINE void conv1d_tile(const float* xg, int64_t len, const float* wo, int64_t wstride,
                              const float* bias, int64_t ipg, int64_t kernel, int64_t dilation,
                              float* yo, int64_t out_len, int64_t t0) {
  using F = typename Lanes<W>::F;
  F acc[OB][TV];
  for (int ob = 0; ob < OB; ++ob) {
    const F b = splat<F>(bias ? bias[ob] : 0.0f);
    for (int tv = 0; tv < TV; ++tv) acc[ob][tv] = b;
  }
  for (int64_t c = 0; c < ipg; ++c) {
    const float* xc = xg + c * len + t0;
    const float* wc = wo + c * kernel;
    for (int64_t j = 0; j < kernel; ++j) {
      const float* xs = xc + j * dilation;
      F xv[TV];
      for (int tv = 0; tv < TV; ++tv) xv[tv] = loadu<F>(xs + tv * W);
      for (int ob = 0; ob < OB; ++ob) {
        const float wj = wc[ob * wstride + j];
        for (int tv = 0; tv < TV; ++tv) acc[ob][tv] = acc[ob][tv] + wj * xv[tv];
      }
    }
  }
  for (int ob = 0; ob < OB; ++ob)
    for (int tv = 0; tv < TV; ++tv)
      std::memcpy(yo + ob * out_len + t0 + tv * W, &acc[ob][tv], sizeof(F));
}

// The scalar order for y[o][t0 .. t1) (ragged ends and the oracle's own loop).
inline void conv1d_scalar_row(const float* xg, int64_t len, const float* wo, float b, int64_t ipg,
                              int64_t kernel, int64_t stride, int64_t dilation, float* yo,
                              int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) yo[t] = b;
  for (int64_t c = 0; c < ipg; ++c) {
    const float* xc = xg + c * len;
    const float* wc = wo + c * kernel;
    for (int64_t j = 0; j < kernel; ++j) {
      const float wj = wc[j];
      const float* xs = xc + j * dilation;
      for (int64_t t = t0; t < t1; ++t) yo[t] += wj * xs[t * stride];
    }
  }
}

// Output channels [o, o + OB) (one group), stride 1, out_len >= W. (No lambdas here: a lambda
// body would not inherit the caller's target attribute.)
template <int W, int OB>
DRAMA_INLINE void conv1d_channel_block(const float* xg, int64_t len, const float* w,
                                       const float* bias, int64_t ipg, int64_t kernel,
                                       int64_t dilation, float* y, int64_t out_len, int64_t o) {
  const int64_t wstride = ipg * kernel;
  const float* wo = w + o * wstride;
  const float* bo = bias ? bias + o : nullptr;
  float* yo = y + o * out_len;
  int64_t t = 0;
  constexpr int TV = OB >= 4 ? 4 : 8;
  for (; t + TV * W <= out_len; t += TV * W)
    conv1d_tile<W, OB, TV>(xg, len, wo, wstride, bo, ipg, kernel, dilation, yo, out_len, t);
  for (; t + W <= out_len; t += W)
    conv1d_tile<W, OB, 1>(xg, len, wo, wstride, bo, ipg, kernel, dilation, yo, out_len, t);
  if (t < out_len)
    for (int ob = 0; ob < OB; ++ob)
      conv1d_scalar_row(xg, len, wo + ob * wstride, bo ? bo[ob] : 0.0f, ipg, kernel, 1, dilation,
                        yo + ob * out_len, t, out_len);
}

template <int W>
DRAMA_INLINE void conv1d_rows_simd(const float* xg, int64_t len, const float* w, const float* bias,
                                   int64_t ipg, int64_t kernel, int64_t dilation, float* y,
                                   int64_t out_len, int64_t o0, int64_t o1) {
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4)
    conv1d_channel_block<W, 4>(xg, len, w, bias, ipg, kernel, dilation, y, out_len, o);
  for (; o + 2 <= o1; o += 2)
    conv1d_channel_block<W, 2>(xg, len, w, bias, ipg, kernel, dilation, y, out_len, o);
  for (; o < o1; ++o)
    conv1d_channel_block<W, 1>(xg, len, w, bias, ipg, kernel, dilation, y, out_len, o);
}

// Lanes over W output channels o0 .. o0 + W of one group; out_len < W steps, any stride.
template <int W, int NT>
DRAMA_INLINE void conv1d_channels_tile(const float* xg, int64_t len, const float* wo,
                                       int64_t wstride, const float* bias, int64_t ipg,
                                       int64_t kernel, int64_t stride, int64_t dilation, float* yo,
                                       int64_t out_len, int64_t t0) {
  using F = typename Lanes<W>::F;
  F acc[NT];
  F b{};
  for (int l = 0; l < W; ++l) b[l] = bias ? bias[l] : 0.0f;
  for (int nt = 0; nt < NT; ++nt) acc[nt] = b;
  for (int64_t c = 0; c < ipg; ++c) {
    const float* xc = xg + c * len + t0 * stride;
    const float* wc = wo + c * kernel;
    for (int64_t j = 0; j < kernel; ++j) {
      F wv;
      for (int l = 0; l < W; ++l) wv[l] = wc[l * wstride + j];
      const float* xs = xc + j * dilation;
      for (int nt = 0; nt < NT; ++nt) acc[nt] = acc[nt] + wv * xs[nt * stride];
    }
  }
  for (int nt = 0; nt < NT; ++nt)
    for (int l = 0; l < W; ++l) yo[l * out_len + t0 + nt] = acc[nt][l];
}

template <int W>
DRAMA_INLINE void conv1d_channels_simd(const float* xg, int64_t len, const float* w,
                                       const float* bias, int64_t ipg, int64_t kernel,
                                       int64_t stride, int64_t dilation, float* y, int64_t out_len,
                                       int64_t o0, int64_t o1) {
  const int64_t wstride = ipg * kernel;
  int64_t o = o0;
  for (; o + W <= o1; o += W) {
    const float* wo = w + o * wstride;
    const float* bo = bias ? bias + o : nullptr;
    float* yo = y + o * out_len;
    int64_t t = 0;
    for (; t + 4 <= out_len; t += 4)
      conv1d_channels_tile<W, 4>(xg, len, wo, wstride, bo, ipg, kernel, stride, dilation, yo,
                                 out_len, t);
    for (; t + 2 <= out_len; t += 2)
      conv1d_channels_tile<W, 2>(xg, len, wo, wstride, bo, ipg, kernel, stride, dilation, yo,
                                 out_len, t);
    for (; t < out_len; ++t)
      conv1d_channels_tile<W, 1>(xg, len, wo, wstride, bo, ipg, kernel, stride, dilation, yo,
                                 out_len, t);
  }
  for (; o < o1; ++o)
    conv1d_scalar_row(xg, len, w + o * wstride, bias ? bias[o] : 0.0f, ipg, kernel, stride,
                      dilation, y + o * out_len, 0, out_len);
}

constexpr int64_t kMaxTaps = 4;  // SIMD transposed convolution: kernel <= 4 * stride

// conv_transpose1d, polyphase. xp: the group's inputs, row c at xp + c * xp_stride, input step
// t at index t + (M - 1), zeros around. Outputs of channels [o0, o0 + OB) (one group), phases
// r, q in [q0, q0 + QV * W).
template <int W, int OB, int QV, bool Edge>
DRAMA_INLINE void convt_tile(const float* xp, int64_t xp_stride, int64_t len, const float* wg,
                             int64_t opg, int64_t ol0, const float* bias, int64_t ipg,
                             int64_t kernel, int64_t stride, int64_t m_count, float* y,
                             int64_t out_len, int64_t q0) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  // Lanes whose input step t = q - m exists, per (m, vector); computed once per tile.
  I ok[kMaxTaps][QV];
  if constexpr (Edge) {
    for (int64_t m = 0; m < m_count; ++m)
      for (int qv = 0; qv < QV; ++qv)
        for (int l = 0; l < W; ++l) {
          const int64_t t = q0 + qv * W + l - m;
          ok[m][qv][l] = (t >= 0 && t < len) ? -1 : 0;
        }
  }
  for (int64_t r = 0; r < stride; ++r) {
    F acc[OB][QV];
    for (int ob = 0; ob < OB; ++ob) {
      const F b = splat<F>(bias ? bias[ob] : 0.0f);
      for (int qv = 0; qv < QV; ++qv) acc[ob][qv] = b;
    }
    for (int64_t c = 0; c < ipg; ++c) {
      const float* xc = xp + c * xp_stride + (m_count - 1) + q0;
      const float* wc = wg + (c * opg + ol0) * kernel;
      for (int64_t m = m_count - 1; m >= 0; --m) {
        const int64_t j = r + m * stride;
        if (j >= kernel) continue;
        F xv[QV];
        for (int qv = 0; qv < QV; ++qv) xv[qv] = loadu<F>(xc + qv * W - m);
        for (int ob = 0; ob < OB; ++ob) {
          const float wj = wc[ob * kernel + j];
          for (int qv = 0; qv < QV; ++qv) {
            if constexpr (Edge) {
              // t = q - m must be an input step; other lanes keep their sum untouched.
              acc[ob][qv] = blend(ok[m][qv], acc[ob][qv] + wj * xv[qv], acc[ob][qv]);
            } else {
              acc[ob][qv] = acc[ob][qv] + wj * xv[qv];
            }
          }
        }
      }
    }
    for (int ob = 0; ob < OB; ++ob) {
      float* yo = y + ob * out_len;
      for (int qv = 0; qv < QV; ++qv)
        for (int l = 0; l < W; ++l) {
          const int64_t u = (q0 + qv * W + l) * stride + r;
          if (u < out_len) yo[u] = acc[ob][qv][l];
        }
    }
  }
}

template <int W, int QV, int OB>
DRAMA_INLINE void convt_channel_block(const float* xp, int64_t xp_stride, int64_t len,
                                      const float* wg, int64_t opg, const float* bias, int64_t ipg,
                                      int64_t kernel, int64_t stride, float* y, int64_t out_len,
                                      int64_t og0, int64_t ol) {
  const int64_t m_count = (kernel + stride - 1) / stride;
  const int64_t q_count = (out_len + stride - 1) / stride;
  const float* bo = bias ? bias + og0 + ol : nullptr;
  float* yo = y + (og0 + ol) * out_len;
  // The block's weights [c][ol .. ol + OB)[k] packed contiguously: every phase r re-reads them,
  // and in place they lie out_per_group * kernel floats apart per input channel (cache-set
  // conflicts at the real sizes).
  thread_local std::vector<float> packed;
  packed.resize(static_cast<size_t>(ipg * OB * kernel));
  for (int64_t c = 0; c < ipg; ++c)
    std::memcpy(packed.data() + c * OB * kernel, wg + (c * opg + ol) * kernel,
                static_cast<size_t>(OB * kernel) * sizeof(float));
  const float* wp = packed.data();
  for (int64_t q0 = 0; q0 < q_count; q0 += QV * W) {
    if (q0 < m_count - 1 || q0 + QV * W > len)
      convt_tile<W, OB, QV, true>(xp, xp_stride, len, wp, OB, 0, bo, ipg, kernel, stride, m_count,
                                  yo, out_len, q0);
    else
      convt_tile<W, OB, QV, false>(xp, xp_stride, len, wp, OB, 0, bo, ipg, kernel, stride, m_count,
                                   yo, out_len, q0);
  }
}

template <int W, int QV>
DRAMA_INLINE void convt_rows_q(const float* xp, int64_t xp_stride, int64_t len, const float* wg,
                               int64_t opg, const float* bias, int64_t ipg, int64_t kernel,
                               int64_t stride, float* y, int64_t out_len, int64_t og0, int64_t ol0,
                               int64_t ol1) {
  int64_t ol = ol0;
  for (; ol + 4 <= ol1; ol += 4)
    convt_channel_block<W, QV, 4>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y,
                                  out_len, og0, ol);
  for (; ol < ol1; ++ol)
    convt_channel_block<W, QV, 1>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y,
                                  out_len, og0, ol);
}

template <int W>
DRAMA_INLINE void convt_rows(const float* xp, int64_t xp_stride, int64_t len, const float* wg,
                             int64_t opg, const float* bias, int64_t ipg, int64_t kernel,
                             int64_t stride, float* y, int64_t out_len, int64_t og0, int64_t ol0,
                             int64_t ol1) {
  const int64_t q_count = (out_len + stride - 1) / stride;
  const int64_t vectors = (q_count + W - 1) / W;
  if (vectors >= 4)
    convt_rows_q<W, 4>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0,
                       ol1);
  else if (vectors == 3)
    convt_rows_q<W, 3>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0,
                       ol1);
  else if (vectors == 2)
    convt_rows_q<W, 2>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0,
                       ol1);
  else
    convt_rows_q<W, 1>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0,
                       ol1);
}

// ELU on lanes: expm1 evaluated in float64 (exp by range reduction x = n ln2 + r, |r| <= ln2/2,
// and a degree-11 Taylor polynomial, relative error below 1e-15; then exp(x) - 1, whose
// cancellation costs at most 1e-16 absolute, so |x| >= 1e-8 keeps relative error below 1e-8),
// rounded to float once: within the contract's 4u alpha + 2u |y| (std::expm1 in float is also
// within it, but the two may differ in the last bit). Tiny -1e-8 < x <= 0 gives x + x*x/2.
// U groups of W lanes at once, each lane's operations exactly those of one group alone: the
// polynomial is a chain of dependent multiplies and adds, and interleaving U independent chains
// lets the core overlap them (one group at a time, the chain's latency bound the ELU: about 1 ns
// an element on Zen 5, 17% of a drama-mini frame's decode).
template <int W, int U>
DRAMA_INLINE void elu_lanes(const float* xs, float alpha, float* ys) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  using D = typename Lanes<W>::D;
  using L = typename Lanes<W>::L;
  static constexpr double kCoef[] = {
      1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0,
      1.0 / 24.0,      1.0 / 6.0,      0.5,           1.0,          1.0};
  const D shifter = splat_d<D>(0x1.8p52);
  F xf[U];
  D v[U], t[U], r[U], p[U];
  for (int u = 0; u < U; ++u) {
    xf[u] = loadu<F>(xs + u * W);
    v[u] = __builtin_convertvector(xf[u], D);
    v[u] = blend((L)(v[u] < -80.0), splat_d<D>(-80.0), v[u]);
    t[u] = v[u] * 1.4426950408889634 + shifter;
    const D k = t[u] - shifter;
    r[u] = (v[u] - k * 0.693147180559890330187) - k * 5.4979230187083711552e-14;
    p[u] = splat_d<D>(1.0 / 39916800.0);
  }
  for (double c : kCoef)
    for (int u = 0; u < U; ++u) p[u] = p[u] * r[u] + c;
  for (int u = 0; u < U; ++u) {
    const L bits = (((L)t[u] - (L)shifter) + 1023) << 52;
    D e = p[u] * (D)bits - 1.0;
    const D tiny = v[u] + v[u] * v[u] * 0.5;
    e = blend((L)(v[u] > -1e-8), tiny, e);  // positive x take x below anyway
    const F em1 = __builtin_convertvector(e, F);
    const F neg = alpha * em1;
    const F out = blend((I)(xf[u] > 0.0f), xf[u], neg);
    std::memcpy(ys + u * W, &out, sizeof out);
  }
}

template <int W>
DRAMA_INLINE void elu_simd(const float* x, int64_t n, float alpha, float* y) {
  // The ragged end goes through the same lane arithmetic (via a padded copy), so an element's
  // value never depends on its position in the call.
  constexpr int kGroups = 4;
  int64_t i = 0;
  for (; i + kGroups * W <= n; i += kGroups * W) elu_lanes<W, kGroups>(x + i, alpha, y + i);
  for (; i + W <= n; i += W) elu_lanes<W, 1>(x + i, alpha, y + i);
  if (i < n) {
    float xs[W] = {}, ys[W];
    std::memcpy(xs, x + i, static_cast<size_t>(n - i) * sizeof(float));
    elu_lanes<W, 1>(xs, alpha, ys);
    std::memcpy(y + i, ys, static_cast<size_t>(n - i) * sizeof(float));
  }
}

#define DRAMA_AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), noinline))
#define DRAMA_AVX512_INLINE \
  inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), always_inline))
constexpr int64_t kShortMaxLen = 8, kShortMaxOut = 64;
constexpr int64_t kShortPrefetch = 8;  // channel blocks ahead
#define DRAMA_AVX2_FN __attribute__((target("avx2,fma"), noinline))

// conv_transpose1d with a short output row (out_len <= NV * 16: the first decoder upsampling of
// a frame, 3 input steps -> 32 outputs; kernel <= 16): lanes over output steps u of one
// channel; the weight row is one register, and for each input step t it is permuted into place
// (u = t * stride + j); lanes outside the kernel skip the term (masked add), so each element
// still receives its terms in (c, t) ascending order.
template <int NV, int OB>
DRAMA_AVX512_INLINE void convt_short_block(const float* xg, int64_t len, const float* wg,
                                           int64_t opg, const float* bias, int64_t ipg,
                                           int64_t kernel, const __m512i* index,
                                           const __mmask16* mask, float* y, int64_t out_len,
                                           int64_t og0, int64_t ol, int64_t c0, int64_t c1) {
  __m512 acc[OB][NV];
  for (int ob = 0; ob < OB; ++ob) {
    const __m512 b = _mm512_set1_ps(bias ? bias[og0 + ol + ob] : 0.0f);
    const float* yo = y + (og0 + ol + ob) * out_len;
    for (int nv = 0; nv < NV; ++nv) {
      const int64_t rest = out_len - nv * 16;
      const __mmask16 keep = rest >= 16 ? __mmask16(0xffff) : __mmask16((1u << rest) - 1);
      // Input channels [0, c0) were summed by the previous pass (kept in y).
      acc[ob][nv] = c0 == 0 ? b : _mm512_maskz_loadu_ps(keep, yo + nv * 16);
    }
  }
  (void)ipg;
  const __mmask16 row_mask = static_cast<__mmask16>((1u << kernel) - 1);
  for (int64_t c = c0; c < c1; ++c) {
    const float* wc = wg + (c * opg + ol) * kernel;
    __m512 row[OB];
    for (int ob = 0; ob < OB; ++ob) row[ob] = _mm512_maskz_loadu_ps(row_mask, wc + ob * kernel);
    // The same input channel's rows a few channel blocks ahead (read by a later block).
    for (int64_t p = 0; p < OB * kernel; p += 16)
      _mm_prefetch(reinterpret_cast<const char*>(wc + kShortPrefetch * OB * kernel + p),
                   _MM_HINT_T0);
    for (int64_t t = 0; t < len; ++t) {
      const __m512 xb = _mm512_set1_ps(xg[c * len + t]);
      for (int nv = 0; nv < NV; ++nv) {
        const __mmask16 m = mask[t * NV + nv];
        if (m == 0) continue;
        const __m512i idx = index[t * NV + nv];
        for (int ob = 0; ob < OB; ++ob) {
          const __m512 wv = _mm512_permutexvar_ps(idx, row[ob]);
          acc[ob][nv] = _mm512_mask_add_ps(acc[ob][nv], m, acc[ob][nv], _mm512_mul_ps(xb, wv));
        }
      }
    }
  }
  for (int ob = 0; ob < OB; ++ob) {
    float* yo = y + (og0 + ol + ob) * out_len;
    for (int nv = 0; nv < NV; ++nv) {
      const int64_t rest = out_len - nv * 16;
      const __mmask16 keep = rest >= 16 ? __mmask16(0xffff) : __mmask16((1u << rest) - 1);
      _mm512_mask_storeu_ps(yo + nv * 16, keep, acc[ob][nv]);
    }
  }
}

template <int NV>
DRAMA_AVX512_INLINE void convt_short(const float* xg, int64_t len, const float* wg, int64_t opg,
                                     const float* bias, int64_t ipg, int64_t kernel, int64_t stride,
                                     float* y, int64_t out_len, int64_t og0, int64_t ol0,
                                     int64_t ol1) {
  // Lane l of output vector nv takes tap j = nv * 16 + l - t * stride of the row (kernel <= 16
  // taps, one register): a permutation of the row, and a mask of the lanes with 0 <= j < kernel.
  __m512i index[kShortMaxLen * NV];
  __mmask16 mask[kShortMaxLen * NV];
  for (int64_t t = 0; t < len; ++t)
    for (int nv = 0; nv < NV; ++nv) {
      const int64_t off = nv * 16 - t * stride;
      uint32_t m = 0;
      alignas(64) int32_t lanes[16];
      for (int l = 0; l < 16; ++l) {
        const bool in = off + l >= 0 && off + l < kernel;
        if (in) m |= 1u << l;
        lanes[l] = in ? static_cast<int32_t>(off + l) : 0;
      }
      index[t * NV + nv] = _mm512_load_si512(lanes);
      mask[t * NV + nv] = static_cast<__mmask16>(m);
    }
  // Input channels in chunks (partial sums kept in y), output channels inside: the weights
  // [c][o][k] are then read as a few sequential streams instead of one jump per channel.
  constexpr int64_t kChunk = 16;
  for (int64_t c0 = 0; c0 < ipg; c0 += kChunk) {
    const int64_t c1 = std::min(ipg, c0 + kChunk);
    int64_t ol = ol0;
    for (; ol + 4 <= ol1; ol += 4)
      convt_short_block<NV, 4>(xg, len, wg, opg, bias, ipg, kernel, index, mask, y, out_len, og0,
                               ol, c0, c1);
    for (; ol < ol1; ++ol)
      convt_short_block<NV, 1>(xg, len, wg, opg, bias, ipg, kernel, index, mask, y, out_len, og0,
                               ol, c0, c1);
  }
}

DRAMA_AVX512_FN void convt_short_avx512(const float* xg, int64_t len, const float* wg, int64_t opg,
                                        const float* bias, int64_t ipg, int64_t kernel,
                                        int64_t stride, float* y, int64_t out_len, int64_t og0,
                                        int64_t ol0, int64_t ol1) {
  const int64_t nv = (out_len + 15) / 16;
  if (nv == 1)
    convt_short<1>(xg, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0, ol1);
  else if (nv == 2)
    convt_short<2>(xg, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0, ol1);
  else if (nv == 3)
    convt_short<3>(xg, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0, ol1);
  else
    convt_short<4>(xg, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0, ol1);
}

DRAMA_AVX512_FN void conv1d_rows_avx512(const float* xg, int64_t len, const float* w,
                                        const float* bias, int64_t ipg, int64_t kernel,
                                        int64_t dilation, float* y, int64_t out_len, int64_t o0,
                                        int64_t o1) {
  conv1d_rows_simd<16>(xg, len, w, bias, ipg, kernel, dilation, y, out_len, o0, o1);
}
DRAMA_AVX2_FN void conv1d_rows_avx2(const float* xg, int64_t len, const float* w, const float* bias,
                                    int64_t ipg, int64_t kernel, int64_t dilation, float* y,
                                    int64_t out_len, int64_t o0, int64_t o1) {
  conv1d_rows_simd<8>(xg, len, w, bias, ipg, kernel, dilation, y, out_len, o0, o1);
}
// 16x16 transpose: rows r[i] (16 reduction steps of channel i) -> r[s] (channels of step s).
DRAMA_AVX512_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 16; i += 8)
    for (int k = 0; k < 4; ++k) {
      t[i + k] = _mm512_shuffle_f32x4(u[i + k], u[i + 4 + k], 0x88);
      t[i + 4 + k] = _mm512_shuffle_f32x4(u[i + k], u[i + 4 + k], 0xDD);
    }
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD);
  }
}

// Lanes over 16 output channels, NT output steps: the weight rows (reduction r = c * kernel + j
// contiguous per channel) are read 16 steps at a time and transposed in registers, then each
// step r updates every lane in ascending r, as the scalar loop does.
template <int NT>
DRAMA_AVX512_INLINE void conv1d_channels_tile16(const float* xg, int64_t len, const float* wo,
                                                int64_t wstride, const float* bias, int64_t kernel,
                                                int64_t stride, int64_t dilation, float* yo,
                                                int64_t out_len, int64_t t0) {
  __m512 acc[NT];
  const __m512 b = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  for (int nt = 0; nt < NT; ++nt) acc[nt] = b;
  int64_t c = 0, j = 0;  // (c, j) of reduction step r
  for (int64_t r0 = 0; r0 < wstride; r0 += 16) {
    const int64_t steps = std::min<int64_t>(16, wstride - r0);
    const __mmask16 m = static_cast<__mmask16>((1u << steps) - 1);
    __m512 w[16];
    for (int i = 0; i < 16; ++i) w[i] = _mm512_maskz_loadu_ps(m, wo + i * wstride + r0);
    transpose16(w);
    for (int64_t s = 0; s < steps; ++s) {
      const float* xs = xg + c * len + t0 * stride + j * dilation;
      for (int nt = 0; nt < NT; ++nt)
        acc[nt] = _mm512_add_ps(acc[nt], _mm512_mul_ps(w[s], _mm512_set1_ps(xs[nt * stride])));
      if (++j == kernel) {
        j = 0;
        ++c;
      }
    }
  }
  alignas(64) float out[16];
  for (int nt = 0; nt < NT; ++nt) {
    _mm512_store_ps(out, acc[nt]);
    for (int l = 0; l < 16; ++l) yo[l * out_len + t0 + nt] = out[l];
  }
}

DRAMA_AVX512_FN void conv1d_channels_avx512(const float* xg, int64_t len, const float* w,
                                            const float* bias, int64_t ipg, int64_t kernel,
                                            int64_t stride, int64_t dilation, float* y,
                                            int64_t out_len, int64_t o0, int64_t o1) {
  const int64_t wstride = ipg * kernel;
  int64_t o = o0;
  for (; o + 16 <= o1; o += 16) {
    const float* wo = w + o * wstride;
    const float* bo = bias ? bias + o : nullptr;
    float* yo = y + o * out_len;
    int64_t t = 0;
    for (; t + 4 <= out_len; t += 4)
      conv1d_channels_tile16<4>(xg, len, wo, wstride, bo, kernel, stride, dilation, yo, out_len, t);
    for (; t + 2 <= out_len; t += 2)
      conv1d_channels_tile16<2>(xg, len, wo, wstride, bo, kernel, stride, dilation, yo, out_len, t);
    for (; t < out_len; ++t)
      conv1d_channels_tile16<1>(xg, len, wo, wstride, bo, kernel, stride, dilation, yo, out_len, t);
  }
  if (o < o1)
    conv1d_channels_simd<16>(xg, len, w, bias, ipg, kernel, stride, dilation, y, out_len, o, o1);
}
DRAMA_AVX2_FN void conv1d_channels_avx2(const float* xg, int64_t len, const float* w,
                                        const float* bias, int64_t ipg, int64_t kernel,
                                        int64_t stride, int64_t dilation, float* y, int64_t out_len,
                                        int64_t o0, int64_t o1) {
  conv1d_channels_simd<8>(xg, len, w, bias, ipg, kernel, stride, dilation, y, out_len, o0, o1);
}
DRAMA_AVX512_FN void convt_rows_avx512(const float* xp, int64_t xp_stride, int64_t len,
                                       const float* wg, int64_t opg, const float* bias, int64_t ipg,
                                       int64_t kernel, int64_t stride, float* y, int64_t out_len,
                                       int64_t og0, int64_t ol0, int64_t ol1) {
  convt_rows<16>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0, ol1);
}
DRAMA_AVX2_FN void convt_rows_avx2(const float* xp, int64_t xp_stride, int64_t len, const float* wg,
                                   int64_t opg, const float* bias, int64_t ipg, int64_t kernel,
                                   int64_t stride, float* y, int64_t out_len, int64_t og0,
                                   int64_t ol0, int64_t ol1) {
  convt_rows<8>(xp, xp_stride, len, wg, opg, bias, ipg, kernel, stride, y, out_len, og0, ol0, ol1);
}

// ELU runs on half-width float vectors so that their float64 widening fills one register. Only
// inputs that are not positive need the exponential (a positive one is its own output): blocks of
// the input are gathered densely (compress), run through elu_simd, and put back in place
// (expand). Each element's value is the same as elu_simd's on the whole input; about half the
// polynomial work on a decoder's activations.
DRAMA_AVX512_FN void elu_avx512(const float* x, int64_t n, float alpha, float* y) {
  constexpr int64_t kBlock = 1024;
  alignas(64) float dense[kBlock];
  __mmask16 masks[kBlock / 16];
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t bn = std::min(kBlock, n - b0);
    int64_t k = 0;
    for (int64_t i = 0; i < bn; i += 16) {
      const __mmask16 valid =
          bn - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (bn - i)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(valid, x + b0 + i);
      const __mmask16 m =
          static_cast<__mmask16>(valid & ~_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ));
      masks[i / 16] = m;
      _mm512_mask_compressstoreu_ps(dense + k, m, v);
      k += __builtin_popcount(m);
    }
    elu_simd<8>(dense, k, alpha, dense);
    k = 0;
    for (int64_t i = 0; i < bn; i += 16) {
      const __mmask16 valid =
          bn - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (bn - i)) - 1);
      const __mmask16 m = masks[i / 16];
      const __m512 v = _mm512_maskz_loadu_ps(valid, x + b0 + i);
      const __m512 out = _mm512_mask_expandloadu_ps(v, m, dense + k);
      _mm512_mask_storeu_ps(y + b0 + i, valid, out);
      k += __builtin_popcount(m);
    }
  }
}
DRAMA_AVX2_FN void elu_avx2(const float* x, int64_t n, float alpha, float* y) {
  elu_simd<4>(x, n, alpha, y);
}

}  // namespace

void CpuBackend::conv1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                        const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                        int64_t dilation, int64_t groups, float* y, int64_t out_len) {
  const int64_t in_per_group = in_ch / groups, out_per_group = out_ch / groups;
  const int lanes = isa_ == Isa::Avx512 ? 16 : isa_ == Isa::Avx2 ? 8 : 0;
  // Work per output channel (thread_pool.h): its weights and multiply-adds.
  const double conv_work = static_cast<double>(in_per_group * kernel) * (4.0 + out_len);
  pool_.parallel_for(out_ch, 1, conv_work, [&](int64_t o0, int64_t o1) {
    // Runs of output channels inside one group.
    for (int64_t a = o0; a < o1;) {
      const int64_t g = a / out_per_group, e = std::min(o1, (g + 1) * out_per_group);
      const float* xg = x + g * in_per_group * len;
      if (lanes > 0 && stride == 1 && out_len >= lanes) {
        if (isa_ == Isa::Avx512)
          conv1d_rows_avx512(xg, len, w, bias, in_per_group, kernel, dilation, y, out_len, a, e);
        else
          conv1d_rows_avx2(xg, len, w, bias, in_per_group, kernel, dilation, y, out_len, a, e);
      } else if (lanes > 0 && out_len < lanes && e - a >= lanes) {
        if (isa_ == Isa::Avx512)
          conv1d_channels_avx512(xg, len, w, bias, in_per_group, kernel, stride, dilation, y,
                                 out_len, a, e);
        else
          conv1d_channels_avx2(xg, len, w, bias, in_per_group, kernel, stride, dilation, y, out_len,
                               a, e);
      } else {
        for (int64_t o = a; o < e; ++o)
          conv1d_scalar_row(xg, len, w + o * in_per_group * kernel, bias ? bias[o] : 0.0f,
                            in_per_group, kernel, stride, dilation, y + o * out_len, 0, out_len);
      }
      a = e;
    }
  });
}

void CpuBackend::conv_transpose1d(const float* x, int64_t in_ch, int64_t len, const float* w,
                                  const float* bias, int64_t out_ch, int64_t kernel, int64_t stride,
                                  int64_t groups, float* y) {
  const int64_t in_per_group = in_ch / groups, out_per_group = out_ch / groups;
  const int64_t out_len = (len - 1) * stride + kernel;
  const int lanes = isa_ == Isa::Avx512 ? 16 : isa_ == Isa::Avx2 ? 8 : 0;
  const double convt_work = static_cast<double>(in_per_group * kernel) * (4.0 + len);
  if (isa_ == Isa::Avx512 && len > 0 && len <= kShortMaxLen && out_len <= kShortMaxOut &&
      kernel <= 16 && out_per_group * in_per_group >= 16) {
    pool_.parallel_for(out_ch, 1, convt_work, [&](int64_t o0, int64_t o1) {
      for (int64_t a = o0; a < o1;) {
        const int64_t g = a / out_per_group, e = std::min(o1, (g + 1) * out_per_group);
        const int64_t og0 = g * out_per_group;
        convt_short_avx512(x + g * in_per_group * len, len,
                           w + g * in_per_group * out_per_group * kernel, out_per_group, bias,
                           in_per_group, kernel, stride, y, out_len, og0, a - og0, e - og0);
        a = e;
      }
    });
    return;
  }
  if (lanes > 0 && len > 0 && out_per_group * in_per_group >= 16 && kernel <= kMaxTaps * stride) {
    // Zero-padded copy of the input: step t of channel c at c * xp_stride + (M - 1) + t, with
    // room for whole vectors of q past the end.
    const int64_t m_count = (kernel + stride - 1) / stride;
    const int64_t q_count = (out_len + stride - 1) / stride;
    const int64_t xp_stride = (m_count - 1) + (q_count + 4 * lanes) + 1;
    // Each row written once: its zeros before and after, the input between (zeroing the whole
    // buffer first, then copying, was 3.5% of a drama-mini frame's decode).
    thread_local std::vector<float> padded;
    if (padded.size() < static_cast<size_t>(in_ch * xp_stride))
      padded.resize(static_cast<size_t>(in_ch * xp_stride));
    for (int64_t c = 0; c < in_ch; ++c) {
      float* row = padded.data() + c * xp_stride;
      std::fill(row, row + (m_count - 1), 0.0f);
      std::memcpy(row + (m_count - 1), x + c * len, static_cast<size_t>(len) * sizeof(float));
      std::fill(row + (m_count - 1) + len, row + xp_stride, 0.0f);
    }
    const float* xp = padded.data();
    pool_.parallel_for(out_ch, 1, convt_work, [&](int64_t o0, int64_t o1) {
      for (int64_t a = o0; a < o1;) {
        const int64_t g = a / out_per_group, e = std::min(o1, (g + 1) * out_per_group);
        const float* xg = xp + g * in_per_group * xp_stride;
        const float* wg = w + g * in_per_group * out_per_group * kernel;
        const int64_t og0 = g * out_per_group;
        if (isa_ == Isa::Avx512)
          convt_rows_avx512(xg, xp_stride, len, wg, out_per_group, bias, in_per_group, kernel,
                            stride, y, out_len, og0, a - og0, e - og0);
        else
          convt_rows_avx2(xg, xp_stride, len, wg, out_per_group, bias, in_per_group, kernel, stride,
                          y, out_len, og0, a - og0, e - og0);
        a = e;
      }
    });
    return;
  }
  pool_.parallel_for(out_ch, 1, convt_work, [&](int64_t o0, int64_t o1) {
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
    if (isa_ == Isa::Avx512)
      elu_avx512(x + i0, i1 - i0, alpha, y + i0);
    else if (isa_ == Isa::Avx2)
      elu_avx2(x + i0, i1 - i0, alpha, y + i0);
    else
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

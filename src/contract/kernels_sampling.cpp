// Guidance, sampling and the non-finite guard: the batched calls between the heads' logits and
// the frame's codes (spec section 6). Each call serves every session's rows of one codebook
// position, with per-row guidance and sampling parameters.
#include <algorithm>
#include <cfloat>
#include <memory>
#include <numeric>

#include "contract/kernels.h"
#include "contract/registry_util.h"
#include "util/error.h"
#include "util/sampling.h"

namespace drama::contract {

namespace {

// The sampler of util/sampling.h in float64 (the float64 reference of the sample kernel).
int64_t reference_sample(const std::vector<double>& logits, double temperature, int64_t top_k,
                         double top_p, double u) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (temperature <= 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  std::vector<double> s(logits.size());
  for (int64_t i = 0; i < n; ++i) s[i] = logits[i] / temperature;
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  int64_t keep = (top_k > 0 && top_k < n) ? top_k : n;
  std::vector<double> p(keep);
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += (p[i] = std::exp(s[order[i]] - s[order[0]]));
  if (top_p < 1.0) {
    double run = 0;
    int64_t m = 0;
    while (m < keep) {
      run += p[m++];
      if (run >= top_p * total) break;
    }
    keep = std::max<int64_t>(m, 1);
    total = run;
  }
  double run = 0;
  for (int64_t i = 0; i < keep; ++i)
    if ((run += p[i]) > u * total) return order[i];
  return order[keep - 1];
}

}  // namespace

// guidance_combine: u + gamma (c - u): a subtract, a multiply and an add, each rounding once:
// |err| <= 4u (|u| + gamma (|c| + |u|)); a row without an unconditional branch is a copy (bound
// 0: exact). NMSE limit 64 u^2. Twin: float16 arithmetic. The logits hold the rows of paired
// sessions (cond, uncond) and single ones (cond only), as a step lays them out; the table mixes
// per-row gammas and copy rows, and output rows do not follow the logits' order.
std::vector<KernelCase> guidance_combine_cases(uint64_t seed, Fault fault) {
  const int64_t shapes[][2] = {{2049, 5}, {257, 1}, {65, 2}, {2048, 7}};  // vocab, output rows
  const float gammas[] = {1.5f, 2.0f, 3.0f, 1.25f};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 53 + s);
    const int64_t vocab = shapes[s][0], rows = shapes[s][1];
    auto table = std::make_shared<std::vector<GuidanceRow>>();
    int32_t next = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const bool paired = rows == 1 || r % 3 != 2;  // every third row a single-branch session
      GuidanceRow g{next, paired ? next + 1 : -1, paired ? gammas[rng.integer(0, 3)] : 1.0f};
      next += paired ? 2 : 1;
      table->push_back(g);
    }
    std::shuffle(table->begin(), table->end(), rng.gen);
    auto logits = std::make_shared<std::vector<float>>(rng.normals(next * vocab, 0.0, 3.0));
    KernelCase c;
    c.label = "vocab=" + std::to_string(vocab) + " rows=" + std::to_string(rows) +
              " logit rows=" + std::to_string(next);
    c.rows = rows;
    c.row_elems = vocab;
    for (const GuidanceRow& g : *table)
      for (int64_t i = 0; i < vocab; ++i) {
        const double cc = (*logits)[g.cond_row * vocab + i];
        if (g.uncond_row < 0) {
          c.reference.push_back(cc);
          c.degraded.push_back(to_f16(cc));
          c.atol.push_back(0.0);
          continue;
        }
        const double uu = (*logits)[g.uncond_row * vocab + i], gm = g.gamma;
        c.reference.push_back(uu + gm * (cc - uu));
        c.degraded.push_back(to_f16(to_f16(uu) + to_f16(gm * to_f16(to_f16(cc) - to_f16(uu)))));
        c.atol.push_back(4 * kU32 * (std::fabs(uu) + gm * (std::fabs(cc) + std::fabs(uu))));
      }
    c.nmse_limit = 64 * kU32 * kU32;
    c.input_norms = {l2(*logits)};
    c.run = [logits, table, vocab, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      std::vector<GuidanceRow> t(table->begin() + r0, table->begin() + r0 + n);
      if (fault == Fault::GammaOnWrongBranch)
        for (GuidanceRow& g : t)
          if (g.uncond_row >= 0) std::swap(g.cond_row, g.uncond_row);
      DeviceCopies d(b);
      b.guidance_combine(d.in(*logits), vocab, d.in(t), n, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

namespace {

// One sampling call's ids and flags as a step lays them out: codes [rows, K + 1] int32, ids of
// codebook `cb` in column cb, the non-finite flag in column K. Runs sample_rows on rows
// [r0, r0 + n) and writes (id, flag) per row; false when a column the call does not own changed.
bool run_sample_rows(Backend& b, const std::vector<float>& logits, int64_t vocab,
                     const std::vector<SampleRow>& rows, const std::vector<int32_t>& preset_flags,
                     int64_t cb, int64_t K, int64_t r0, int64_t n, float* out) {
  IntOut codes(n * (K + 1));
  for (int64_t r = 0; r < n; ++r) codes.data()[r * (K + 1) + K] = preset_flags[r0 + r];
  {
    DeviceCopies d(b);
    int32_t* codes_dev = d.output(codes.buf.data(), codes.buf.size()) + 8;
    b.sample_rows(d.in(logits.data() + r0 * vocab, size_t(n * vocab)), vocab,
                  d.in(rows.data() + r0, size_t(n)), n, cb, codes_dev + cb, codes_dev + K, K + 1);
    d.finish();
  }
  bool untouched = codes.guards_ok();
  std::vector<float> host(static_cast<size_t>(2 * n));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t col = 0; col < K; ++col)
      if (col != cb) untouched = untouched && codes.data()[r * (K + 1) + col] == kPoison;
    host[2 * r] = codes.at(r * (K + 1) + cb);
    host[2 * r + 1] = codes.at(r * (K + 1) + K);
  }
  stage(b, out, host.data(), 2 * n);
  return untouched;
}

}  // namespace

// sample_rows: (id, flag) per row, exact. Rows mix temperatures, top-k and top-p, seeds and
// frames in one call (one codebook per call). Each finite row's logits are built around its own
// uniform u so that the draw sits 1e-5 (in probability) from a boundary of the running sum (or,
// greedy, on a 1e-4 near-tie): float32 keeps the reference's pick, float16 logits (the twin) move
// the boundary by about 1e-3 and change it. A row is accepted only if the next frame's uniform
// also changes its pick, and, for top-p rows, sampling without top-p does too (so the planted
// off-by-one uniform and ignored top-p are seen on every such row). One row holds a NaN, one an
// Inf: id 0 and flag codebook + 1. A flag already set is kept (one finite row starts with an
// earlier codebook's flag: its id is sampled, its flag left as it was).
std::vector<KernelCase> sample_rows_cases(uint64_t seed, Fault fault) {
  struct Params {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const Params mix[] = {{0.0f, 50, 1.0f}, {0.9f, 50, 1.0f}, {1.3f, 0, 1.0f},
                        {1.0f, 0, 0.95f}, {0.7f, 1, 1.0f},  {0.8f, 20, 0.9f}};
  struct Shape {
    int64_t rows, vocab, codebook, K;
  };
  const Shape shapes[] = {{7, 2049, 0, 8}, {1, 2049, 3, 8}, {2, 65, 1, 4}, {9, 2048, 7, 8}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 59 + s);
    auto logits = std::make_shared<std::vector<float>>(sh.rows * sh.vocab);
    auto rows = std::make_shared<std::vector<SampleRow>>(sh.rows);
    auto preset = std::make_shared<std::vector<int32_t>>(sh.rows, 0);
    KernelCase c;
    c.label = "rows=" + std::to_string(sh.rows) + " vocab=" + std::to_string(sh.vocab) +
              " codebook=" + std::to_string(sh.codebook) + " mixed parameters";
    c.rows = sh.rows;
    c.row_elems = 2;
    c.exact = true;
    const int32_t flag = static_cast<int32_t>(sh.codebook + 1);
    for (int64_t r = 0; r < sh.rows; ++r) {
      float* row = logits->data() + r * sh.vocab;
      const Params p = mix[(r + s) % std::size(mix)];
      SampleRow& sr = (*rows)[r];
      sr.temperature = p.temperature;
      sr.top_k = p.top_k;
      sr.top_p = p.top_p;
      sr.seed = seed ^ (0x5151ull * (s + 1) + uint64_t(r));
      // Rows 2 and 5 hold a NaN and an Inf; row 4 starts with an earlier codebook's flag.
      const bool nan_row = r == 2, inf_row = r == 5, flagged = r == 4;
      if (flagged) (*preset)[r] = 1 + static_cast<int32_t>(rng.integer(0, 30));
      if (nan_row || inf_row) {
        for (int64_t i = 0; i < sh.vocab; ++i) row[i] = static_cast<float>(rng.normal(0.0, 2.0));
        row[rng.integer(0, sh.vocab - 1)] =
            nan_row ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
        sr.frame = uint64_t(rng.integer(0, 1000));
        c.reference.insert(c.reference.end(), {0.0, double(flag)});
        c.degraded.insert(c.degraded.end(), {0.0, double(flag)});
        continue;
      }
      auto pick = [&](bool f16, double u, float top_p) {
        std::vector<double> l(row, row + sh.vocab);
        if (f16)
          for (auto& v : l) v = to_f16(v);
        return reference_sample(l, p.temperature, p.top_k, top_p, u);
      };
      const bool greedy = p.temperature <= 0 || p.top_k == 1;
      for (int attempt = 0;; ++attempt) {
        sr.frame = uint64_t(rng.integer(0, 100000));
        const double u = counter_uniform(sr.seed, sr.frame, uint64_t(sh.codebook));
        const double u_next = counter_uniform(sr.seed, sr.frame + 1, uint64_t(sh.codebook));
        const int64_t a = rng.integer(0, sh.vocab - 21), b = rng.integer(a + 1, sh.vocab - 1);
        bool ok = false;
        if (greedy) {
          for (int64_t i = 0; i < sh.vocab; ++i) row[i] = static_cast<float>(rng.uniform(-8, 3.5));
          row[b] = 4.0015f;
          row[a] = 4.0014f;
          ok = pick(false, u, p.top_p) != pick(true, u, p.top_p);
        } else {
          // Candidate 0 (id a) carries probability p1; 19 others share the rest equally. The
          // pick is monotone in p1: bisect for the p1 where it changes, then sit 1e-5 aside.
          auto build = [&](double p1) {
            for (int64_t i = 0; i < sh.vocab; ++i) row[i] = -30.0f;
            const double rest = (1 - p1) / 19;
            for (int64_t j = 0; j < 19; ++j)
              row[(a + 1 + j) % sh.vocab] = static_cast<float>(p.temperature * std::log(rest));
            row[a] = static_cast<float>(p.temperature * std::log(p1));
          };
          double lo = 0.06, hi = 0.94;
          build(lo);
          const int64_t at_lo = pick(false, u, p.top_p);
          for (int it = 0; it < 40; ++it) {
            const double mid = 0.5 * (lo + hi);
            build(mid);
            (pick(false, u, p.top_p) == at_lo ? lo : hi) = mid;
          }
          for (double eps : {1e-5, -1e-5}) {
            build(0.5 * (lo + hi) + eps);
            const int64_t want = pick(false, u, p.top_p);
            ok = want != pick(true, u, p.top_p) && want != pick(false, u_next, p.top_p) &&
                 (p.top_p >= 1.0f || want != pick(false, u, 1.0f));
            if (ok) break;
          }
        }
        if (!ok && attempt == 200)
          throw Error("contract: sample_rows case " + std::to_string(s) + " row " +
                      std::to_string(r) + ": no draw near a boundary found in 200 attempts");
        if (ok) {
          const double u_ref = u;
          c.reference.insert(c.reference.end(), {double(pick(false, u_ref, p.top_p)),
                                                 double(flagged ? (*preset)[r] : 0)});
          c.degraded.insert(c.degraded.end(), {double(pick(true, u_ref, p.top_p)),
                                               double(flagged ? (*preset)[r] : 0)});
          break;
        }
      }
    }
    c.input_norms = {l2(*logits)};
    c.run = [logits, rows, preset, sh, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      std::vector<SampleRow> t(*rows);
      for (SampleRow& r : t) {
        if (fault == Fault::OffByOneUniform) r.frame += 1;
        if (fault == Fault::IgnoredTopP) r.top_p = 1.0f;
      }
      return run_sample_rows(b, *logits, sh.vocab, t, *preset, sh.codebook, sh.K, r0, n, out);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// The non-finite guard of sample_rows: per row (id, flag), exact. Rows hold a NaN, +inf (last
// element), -inf (first element, inside, or everywhere), a finite 7e4 (beyond float16's range:
// the float16 twin calls it infinite; one per case) or nothing unusual; greedy rows, so a finite
// row's id is its argmax. Planted fault: a guard that tests x != x and x == +inf only (misses -inf;
// sampling then draws from the row as if it were finite).
std::vector<KernelCase> non_finite_guard_cases(uint64_t seed, Fault fault) {
  // Row kinds: F finite, L a finite 7e4 (float16 overflows: the twin flags it), N a NaN, P +inf
  // at the last element, M -inf at the first, I -inf inside, A -inf everywhere.
  struct Shape {
    int64_t vocab, codebook, K;
    const char* kinds;
  };
  const Shape shapes[] = {{1000, 0, 8, "FNPLMIA"}, {2049, 5, 8, "LIN"}, {65, 2, 4, "L"}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 61 + s);
    const std::string kinds = sh.kinds;
    struct Dims {
      int64_t rows, vocab, codebook, K;
    };
    const Dims dims{static_cast<int64_t>(kinds.size()), sh.vocab, sh.codebook, sh.K};
    auto x = std::make_shared<std::vector<float>>(rng.normals(dims.rows * sh.vocab));
    for (int64_t r = 0; r < dims.rows; ++r) {
      float* row = x->data() + r * sh.vocab;
      const int64_t at = rng.integer(1, sh.vocab - 2);
      switch (kinds[r]) {
        case 'L':
          row[at] = 7e4f;
          break;
        case 'N':
          row[at] = std::numeric_limits<float>::quiet_NaN();
          break;
        case 'P':
          row[sh.vocab - 1] = INFINITY;
          break;
        case 'M':
          row[0] = -INFINITY;
          break;
        case 'I':
          row[at] = -INFINITY;
          break;
        case 'A':
          std::fill(row, row + sh.vocab, -INFINITY);
          break;
        default:
          break;
      }
    }
    auto rows =
        std::make_shared<std::vector<SampleRow>>(dims.rows, SampleRow{0.0f, 0, 1.0f, 0, 0, 0});
    for (int64_t r = 0; r < dims.rows; ++r) (*rows)[r].seed = uint64_t(r);
    auto preset = std::make_shared<std::vector<int32_t>>(dims.rows, 0);
    KernelCase c;
    c.label = "rows=" + std::to_string(dims.rows) + " vocab=" + std::to_string(dims.vocab) +
              " codebook=" + std::to_string(dims.codebook);
    c.rows = dims.rows;
    c.row_elems = 2;
    c.exact = true;
    const double flag = double(dims.codebook + 1);
    for (int64_t r = 0; r < dims.rows; ++r) {
      bool bad = false, bad16 = false;
      int64_t best = 0, best16 = 0;
      for (int64_t i = 0; i < dims.vocab; ++i) {
        const double v = (*x)[r * dims.vocab + i], h = to_f16(v);
        bad = bad || !std::isfinite(v);
        bad16 = bad16 || !std::isfinite(h);
        if (v > (*x)[r * dims.vocab + best]) best = i;
        if (h > to_f16((*x)[r * dims.vocab + best16])) best16 = i;
      }
      c.reference.insert(c.reference.end(), {bad ? 0.0 : double(best), bad ? flag : 0.0});
      c.degraded.insert(c.degraded.end(), {bad16 ? 0.0 : double(best16), bad16 ? flag : 0.0});
    }
    c.input_norms = {l2(*x)};
    c.run = [x, rows, preset, dims, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      std::vector<float> l(*x);
      if (fault == Fault::GuardMissesNegativeInf)
        for (int64_t r = 0; r < dims.rows; ++r) {
          float* row = l.data() + r * dims.vocab;
          bool other = false;
          for (int64_t i = 0; i < dims.vocab; ++i)
            other = other || std::isnan(row[i]) || row[i] == INFINITY;
          if (!other)
            for (int64_t i = 0; i < dims.vocab; ++i)
              if (row[i] == -INFINITY) row[i] = -FLT_MAX;
        }
      return run_sample_rows(b, l, dims.vocab, *rows, *preset, dims.codebook, dims.K, r0, n, out);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// sample_rows: 8 sessions' rows of one codebook in one call (vocab 2049, T 0.9, top-k 50). Each
// row reads its logits once and sorts a top-k prefix: counted as 16 operations per logit (divide,
// partial-sort comparisons, the guard) at the scalar multiply-add rate; 8x that floor + 0.2 ms.
Limit sample_rows_limit() {
  Limit l;
  const int64_t rows = 8, vocab = 2049;
  l.size = "rows=8 vocab=2049 T=0.9 top_k=50";
  l.bytes = double(rows * vocab) * 4;
  l.flops = double(rows * vocab) * 16;
  l.factor = 8.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(9);
    std::vector<float> lg = rng.normals(rows * vocab);
    std::vector<SampleRow> p(rows, SampleRow{0.9f, 50, 1.0f, 0, 1, 2});
    for (int64_t r = 0; r < rows; ++r) p[r].seed = uint64_t(r);
    DeviceCopies d(b);
    const float* lgd = d.in(lg);
    const SampleRow* pd = d.in(p);
    int32_t* codes = d.in(std::vector<int32_t>(rows * 9, 0));
    return median_seconds(21, [&] {
      b.sample_rows(lgd, vocab, pd, rows, 3, codes + 3, codes + 8, 9);
      b.synchronize();
    });
  };
  return l;
}

}  // namespace drama::contract

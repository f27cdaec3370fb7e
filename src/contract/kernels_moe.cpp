// Routing, expert combine, guidance, sampling and the non-finite check: the kernels between the
// backbone and the sampled codes.
#include <algorithm>
#include <memory>
#include <numeric>

#include "contract/kernels.h"
#include "contract/registry_util.h"
#include "util/sampling.h"

namespace drama::contract {

namespace {

constexpr int64_t kSliceRows = 4, kSliceLen = 257;
constexpr int32_t kPoison = INT32_MIN;

// Integer outputs live in their own guarded buffer; unwritten entries come back as NaN.
struct IntOut {
  std::vector<int32_t> buf;
  int64_t n;
  explicit IntOut(int64_t count) : buf(static_cast<size_t>(count + 16), kPoison), n(count) {
    std::fill_n(buf.begin(), 8, -77);
    std::fill_n(buf.end() - 8, 8, -77);
  }
  int32_t* data() { return buf.data() + 8; }
  bool guards_ok() const {
    for (int i = 0; i < 8; ++i)
      if (buf[i] != -77 || buf[buf.size() - 1 - i] != -77) return false;
    return true;
  }
  float at(int64_t i) const {
    const int32_t v = buf[8 + i];
    return v == kPoison ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(v);
  }
};

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

// route_topk: stored indices must be exact (bound 0); weights come from a float32 softmax over
// n stored experts (exp, a sum of n terms, divide) and an optional renormalisation over k:
// relative (n + k + 12) u. The first row of every case holds a near-tie (logits 4.0015 at the
// higher original id, 4.0014 at the lower) that float16 logits, the twin, cannot tell apart.
std::vector<KernelCase> route_topk_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, num_experts, stored, k;
    bool sliced, norm;
  };
  const Shape shapes[] = {{5, 64, 64, 4, false, true},
                          {4, 64, 12, 4, false, false},
                          {3, 64, 12, 2, true, true},
                          {6, 128, 128, 8, false, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 43 + s);
    auto orig = std::make_shared<std::vector<int32_t>>();
    std::vector<int32_t> all(sh.num_experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.gen);
    orig->assign(all.begin(), all.begin() + sh.stored);
    std::sort(orig->begin(), orig->end());
    auto column = std::make_shared<std::vector<int32_t>>(sh.stored);
    for (int64_t i = 0; i < sh.stored; ++i) (*column)[i] = sh.sliced ? int32_t(i) : (*orig)[i];
    const int64_t stride = sh.sliced ? sh.stored : sh.num_experts;
    auto logits = std::make_shared<std::vector<float>>(rng.normals(sh.rows * stride, 0.0, 1.0));
    // Row 0: a near-tie on top; row 1 (when present): exact ties across the board.
    {
      const int64_t a = rng.integer(0, sh.stored - 2), b = rng.integer(a + 1, sh.stored - 1);
      (*logits)[(*column)[b]] = 4.0015f;
      (*logits)[(*column)[a]] = 4.0014f;
      for (int64_t c = 0; c < sh.stored; ++c)
        if (c != a && c != b) (*logits)[(*column)[c]] = std::min((*logits)[(*column)[c]], 3.0f);
      if (sh.rows > 1)
        for (int64_t c = 0; c < sh.stored; ++c) (*logits)[stride + (*column)[c]] = (c % 3) * 0.5f;
    }
    KernelCase c;
    c.label = "rows=" + std::to_string(sh.rows) + " stored=" + std::to_string(sh.stored) + "/" +
              std::to_string(sh.num_experts) + " k=" + std::to_string(sh.k) +
              (sh.sliced ? " sliced" : " full") + (sh.norm ? " norm" : "");
    c.rows = sh.rows;
    c.row_elems = 2 * sh.k;
    const double wtol = double(sh.stored + sh.k + 12) * kU32;
    for (int64_t r = 0; r < sh.rows; ++r) {
      for (int pass = 0; pass < 2; ++pass) {  // 0: reference, 1: float16 twin
        std::vector<double> z(sh.stored);
        for (int64_t i = 0; i < sh.stored; ++i) {
          const double l = (*logits)[r * stride + (*column)[i]];
          z[i] = pass ? to_f16(l) : l;
        }
        const double m = *std::max_element(z.begin(), z.end());
        double sum = 0;
        for (auto& e : z) sum += (e = std::exp(e - m));
        std::vector<int64_t> order(sh.stored);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t x, int64_t y) { return z[x] > z[y]; });
        double ksum = 0;
        for (int64_t j = 0; j < sh.k; ++j) ksum += z[order[j]];
        std::vector<double>& dst = pass ? c.degraded : c.reference;
        for (int64_t j = 0; j < sh.k; ++j) dst.push_back(double(order[j]));
        for (int64_t j = 0; j < sh.k; ++j) dst.push_back(z[order[j]] / (sh.norm ? ksum : sum));
      }
      for (int64_t j = 0; j < sh.k; ++j) c.atol.push_back(0.0);
      for (int64_t j = 0; j < sh.k; ++j) c.atol.push_back(0.0);
    }
    c.rtol = 0;
    // Weights get a relative bound; indices keep a zero bound (exact).
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t j = 0; j < sh.k; ++j)
        c.atol[r * 2 * sh.k + sh.k + j] = wtol * c.reference[r * 2 * sh.k + sh.k + j];
    c.nmse_limit = wtol * wtol;
    c.input_norms = {l2(*logits)};
    c.run = [logits, column, orig, sh, stride, fault](Backend& b, int64_t r0, int64_t n,
                                                      float* out) {
      const int64_t k = fault == Fault::OffByOneTopk ? sh.k + 1 : sh.k;
      IntOut idx(n * k);
      std::vector<float> w(static_cast<size_t>(n * k), std::numeric_limits<float>::quiet_NaN());
      b.route_topk(logits->data() + r0 * stride, n, stride, column->data(), orig->data(), sh.stored,
                   k, sh.norm, idx.data(), w.data());
      std::vector<float> host(static_cast<size_t>(n * 2 * sh.k));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < sh.k; ++j) {
          const int64_t src = (fault == Fault::OffByOneTopk && j == sh.k - 1) ? j + 1 : j;
          host[r * 2 * sh.k + j] = idx.at(r * k + src);
          host[r * 2 * sh.k + sh.k + j] = w[r * k + src];
        }
      stage(b, out, host.data(), n * 2 * sh.k);
      return idx.guards_ok();
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// expert_combine: y + sum of k products in rank order: gamma_{2k+1} (|y| + sum |w e|) per
// element; NMSE limit 32 (2k+1) u^2. Twin: float16 accumulation.
std::vector<KernelCase> expert_combine_cases(uint64_t seed, Fault) {
  const int64_t shapes[][3] = {{5, 4, 100}, {2, 8, 64}, {1, 2, 33}};  // rows, k, dim
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 47 + s);
    const int64_t rows = shapes[s][0], k = shapes[s][1], dim = shapes[s][2];
    auto e = std::make_shared<std::vector<float>>(rng.normals(rows * k * dim));
    auto w = std::make_shared<std::vector<float>>(rows * k);
    for (auto& x : *w) x = static_cast<float>(rng.uniform(0.05, 0.6));
    auto y = std::make_shared<std::vector<float>>(rng.normals(rows * dim));
    KernelCase c;
    c.label =
        "rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " dim=" + std::to_string(dim);
    c.rows = rows;
    c.row_elems = dim;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        double ref = (*y)[r * dim + d], mag = std::fabs(ref);
        double deg = to_f16(ref);  // a float16 accumulator
        for (int64_t j = 0; j < k; ++j) {
          const double p = double((*w)[r * k + j]) * (*e)[(r * k + j) * dim + d];
          ref += p;
          mag += std::fabs(p);
          deg = to_f16(deg + to_f16(p));
        }
        c.reference.push_back(ref);
        c.degraded.push_back(double(deg));
        c.atol.push_back(gamma32(double(2 * k + 1)) * mag);
      }
    c.nmse_limit = 32.0 * double(2 * k + 1) * kU32 * kU32;
    c.input_norms = {l2(*e), l2(*w), l2(*y)};
    c.run = [e, w, y, k, dim](Backend& b, int64_t r0, int64_t n, float* out) {
      stage(b, out, y->data() + r0 * dim, n * dim);
      b.expert_combine(e->data() + r0 * k * dim, w->data() + r0 * k, n, k, dim, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// guidance_combine: u + gamma (c - u): a subtract, a multiply and an add, each rounding once:
// |err| <= 4u (|u| + gamma (|c| + |u|)); NMSE limit 64 u^2. Twin: float16 arithmetic.
std::vector<KernelCase> guidance_combine_cases(uint64_t seed, Fault) {
  std::vector<KernelCase> cases;
  const float gammas[] = {1.5f, 2.0f, 3.0f};
  for (size_t s = 0; s < std::size(gammas); ++s) {
    Rng rng(seed * 53 + s);
    const int64_t n = kSliceRows * kSliceLen;
    auto cond = std::make_shared<std::vector<float>>(rng.normals(n, 0.0, 3.0));
    auto unc = std::make_shared<std::vector<float>>(rng.normals(n, 0.0, 3.0));
    const float g = gammas[s];
    KernelCase c;
    c.label = "gamma=" + std::to_string(g).substr(0, 3) + " n=" + std::to_string(n);
    c.rows = kSliceRows;
    c.row_elems = kSliceLen;
    for (int64_t i = 0; i < n; ++i) {
      const double cc = (*cond)[i], uu = (*unc)[i];
      c.reference.push_back(uu + g * (cc - uu));
      c.degraded.push_back(to_f16(to_f16(uu) + to_f16(g * to_f16(to_f16(cc) - to_f16(uu)))));
      c.atol.push_back(4 * kU32 * (std::fabs(uu) + g * (std::fabs(cc) + std::fabs(uu))));
    }
    c.nmse_limit = 64 * kU32 * kU32;
    c.input_norms = {l2(*cond), l2(*unc)};
    // One logits array [cond rows; uncond rows]; output row r combines cond row r0 + r with
    // uncond row kSliceRows + r0 + r.
    auto both = std::make_shared<std::vector<float>>(*cond);
    both->insert(both->end(), unc->begin(), unc->end());
    c.run = [both, g](Backend& b, int64_t r0, int64_t rows, float* out) {
      std::vector<GuidanceRow> table;
      for (int64_t r = 0; r < rows; ++r)
        table.push_back(
            {static_cast<int32_t>(r0 + r), static_cast<int32_t>(kSliceRows + r0 + r), g});
      b.guidance_combine(both->data(), kSliceLen, table.data(), rows, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// sample: ids are exact. Each row's logits are built around its own uniform u so that the draw
// sits 1e-5 (in probability) from a boundary of the running sum (or, greedy, on a 1e-4 near-tie):
// float32 keeps the reference's pick, float16 logits (the twin) move the boundary by about 1e-3
// and change it.
std::vector<KernelCase> sample_cases(uint64_t seed, Fault) {
  struct Shape {
    int64_t rows, vocab;
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const Shape shapes[] = {{4, 2049, 0.0f, 50, 1.0f},
                          {6, 2049, 0.9f, 50, 1.0f},
                          {6, 65, 1.3f, 0, 1.0f},
                          {6, 2048, 1.0f, 0, 0.95f},
                          {3, 2048, 0.7f, 1, 1.0f}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 59 + s);
    const uint64_t key = seed ^ (0x5151ull * (s + 1));
    auto logits = std::make_shared<std::vector<float>>(sh.rows * sh.vocab);
    KernelCase c;
    c.label =
        "vocab=" + std::to_string(sh.vocab) + " T=" + std::to_string(sh.temperature).substr(0, 3) +
        " top_k=" + std::to_string(sh.top_k) + " top_p=" + std::to_string(sh.top_p).substr(0, 4);
    c.rows = sh.rows;
    c.row_elems = 1;
    c.exact = true;
    for (int64_t r = 0; r < sh.rows; ++r) {
      float* row = logits->data() + r * sh.vocab;
      const double u = counter_uniform(key, uint64_t(r), uint64_t(r % 8));
      const int64_t a = rng.integer(0, sh.vocab - 21), b = rng.integer(a + 1, sh.vocab - 1);
      auto pick = [&](bool f16) {
        std::vector<double> l(row, row + sh.vocab);
        if (f16)
          for (auto& x : l) x = to_f16(x);
        return reference_sample(l, sh.temperature, sh.top_k, sh.top_p, u);
      };
      if (sh.temperature <= 0 || sh.top_k == 1) {
        for (int64_t i = 0; i < sh.vocab; ++i) row[i] = static_cast<float>(rng.uniform(-8, 3.5));
        row[b] = 4.0015f;
        row[a] = 4.0014f;
      } else {
        // Candidate 0 (id a) carries probability p1; 19 others share the rest equally. The pick
        // is monotone in p1: bisect for the p1 where it changes, then sit 1e-5 to one side.
        auto build = [&](double p1) {
          for (int64_t i = 0; i < sh.vocab; ++i) row[i] = -30.0f;
          const double rest = (1 - p1) / 19;
          for (int64_t j = 0; j < 19; ++j)
            row[(a + 1 + j) % sh.vocab] = static_cast<float>(sh.temperature * std::log(rest));
          row[a] = static_cast<float>(sh.temperature * std::log(p1));
        };
        double lo = 0.06, hi = 0.94;
        build(lo);
        const int64_t at_lo = pick(false);
        for (int it = 0; it < 40; ++it) {
          const double mid = 0.5 * (lo + hi);
          build(mid);
          (pick(false) == at_lo ? lo : hi) = mid;
        }
        for (double eps : {1e-5, -1e-5}) {
          build(0.5 * (lo + hi) + eps);
          if (pick(false) != pick(true)) break;
        }
      }
      c.reference.push_back(double(pick(false)));
      c.degraded.push_back(double(pick(true)));
    }
    c.input_norms = {l2(*logits)};
    c.run = [logits, sh, key](Backend& b, int64_t r0, int64_t n, float* out) {
      std::vector<float> ids(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) {
        SampleRow p;
        p.temperature = sh.temperature;
        p.top_k = sh.top_k;
        p.top_p = sh.top_p;
        p.seed = key;
        p.frame = uint64_t(r0 + r);
        int32_t id = -1, flag = 0;
        b.sample_rows(logits->data() + (r0 + r) * sh.vocab, sh.vocab, &p, 1, (r0 + r) % 8, &id,
                      &flag, 1);
        ids[r] = static_cast<float>(id);
      }
      stage(b, out, ids.data(), n);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// has_non_finite: a yes/no per row, exact. Rows hold a NaN, +inf, -inf, a finite 7e4 (beyond
// float16's range: the float16 twin calls it infinite) or nothing unusual.
std::vector<KernelCase> has_non_finite_cases(uint64_t seed, Fault) {
  Rng rng(seed * 61);
  const int64_t rows = 6, n = 1000;
  auto x = std::make_shared<std::vector<float>>(rng.normals(rows * n));
  const int64_t at = rng.integer(0, n - 1);
  (*x)[1 * n + at] = std::numeric_limits<float>::quiet_NaN();
  (*x)[2 * n + n - 1] = INFINITY;
  (*x)[3 * n + at] = 7e4f;
  (*x)[5 * n] = -INFINITY;
  KernelCase c;
  c.label = "rows=6 n=1000";
  c.rows = rows;
  c.row_elems = 1;
  c.exact = true;
  for (int64_t r = 0; r < rows; ++r) {
    bool bad = false, bad16 = false;
    for (int64_t i = 0; i < n; ++i) {
      const double v = (*x)[r * n + i];
      bad = bad || !std::isfinite(v);
      bad16 = bad16 || !std::isfinite(to_f16(v));
    }
    c.reference.push_back(bad ? 1.0 : 0.0);
    c.degraded.push_back(bad16 ? 1.0 : 0.0);
  }
  c.input_norms = {l2(*x)};
  c.run = [=](Backend& b, int64_t r0, int64_t count, float* out) {
    std::vector<float> flags(static_cast<size_t>(count));
    const SampleRow greedy{0.0f, 0, 1.0f, 0, 0, 0};
    for (int64_t r = 0; r < count; ++r) {
      int32_t id = -1, flag = 0;
      b.sample_rows(x->data() + (r0 + r) * n, n, &greedy, 1, 0, &id, &flag, 1);
      flags[r] = flag != 0 ? 1.0f : 0.0f;
    }
    stage(b, out, flags.data(), count);
    return true;
  };
  return {c};
}

Limit small_kernel_limit(const char* kernel) {
  Limit l;
  const std::string name = kernel;
  l.factor = 8.0;
  l.floor_s = 2e-4;
  if (name == "route_topk") {
    l.size = "rows=2 experts=128 k=8";
    l.bytes = 2 * 128 * 4;
    l.time_call = [](Backend& b) {
      Rng rng(9);
      std::vector<float> lg = rng.normals(256), w(16);
      std::vector<int32_t> col(128), idx(16);
      std::iota(col.begin(), col.end(), 0);
      return median_seconds(21, [&] {
        b.route_topk(lg.data(), 2, 128, col.data(), col.data(), 128, 8, true, idx.data(), w.data());
      });
    };
  } else if (name == "sample") {
    l.size = "vocab=2049 T=0.9 top_k=50";
    l.bytes = 2049 * 4;
    l.time_call = [](Backend& b) {
      Rng rng(9);
      std::vector<float> lg = rng.normals(2049);
      return median_seconds(21, [&] {
        const SampleRow p{0.9f, 50, 1.0f, 0, 1, 2};
        int32_t id = 0, flag = 0;
        b.sample_rows(lg.data(), 2049, &p, 1, 3, &id, &flag, 1);
      });
    };
  } else if (name == "expert_combine") {
    l.size = "rows=2 k=8 dim=2048";
    l.bytes = 2.0 * 8 * 2048 * 4 * 2;
    l.time_call = [](Backend& b) {
      Rng rng(9);
      std::vector<float> e = rng.normals(2 * 8 * 2048), w = rng.normals(16), y(2 * 2048);
      return median_seconds(21,
                            [&] { b.expert_combine(e.data(), w.data(), 2, 8, 2048, y.data()); });
    };
  } else if (name == "embed_sum") {
    l.size = "rows=2 ids=8 dim=2048";
    l.bytes = 2.0 * 8 * 2048 * 2;
    l.time_call = [](Backend& b) {
      Rng rng(9);
      const std::vector<uint16_t> t = to_bf16_vec(rng.normals(64 * 2048));
      std::vector<int32_t> ids(16);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 3 % 64);
      std::vector<float> o(2 * 2048);
      return median_seconds(21, [&] { b.embed_sum(t.data(), 2048, ids.data(), 2, 8, o.data()); });
    };
  } else if (name == "vq_encode" || name == "vq_decode") {
    l.size = "codebook=2048x256 n=8";
    l.bytes = 2048.0 * 256 * 4;
    const bool encode = name == "vq_encode";
    if (encode) l.flops = 3.0 * 2048 * 256 * 8;
    l.time_call = [encode](Backend& b) {
      Rng rng(9);
      std::vector<float> cb = rng.normals(2048 * 256), x = rng.normals(8 * 256), o(8 * 256);
      std::vector<int32_t> codes(8, 5);
      return median_seconds(9, [&] {
        if (encode)
          b.vq_encode(cb.data(), 2048, 256, x.data(), 8, codes.data());
        else
          b.vq_decode(cb.data(), 256, codes.data(), 8, o.data());
      });
    };
  }
  return l;
}

}  // namespace drama::contract

// Transformer pieces: embedding sums, RMSNorm, rotary embedding, attention, SwiGLU, add.
// Each tolerance is derived beside its case builder from float32 unit roundoff u = 2^-24.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

#include "contract/kernels.h"
#include "contract/registry_util.h"

namespace drama::contract {

namespace {

// Elementwise kernels are checked as `rows` slices of odd length, so the batch-invariance gate
// compares calls of different lengths (SIMD bodies versus tails) element by element.
constexpr int64_t kSliceRows = 4, kSliceLen = 257;

}  // namespace

// embed_sum: per_row bf16 rows summed in float32: |err| <= gamma_{per_row} * sum|t|; NMSE limit
// 32 * per_row * u^2. Twin: the sum accumulated in float16.
// Planted fault: the last id of every row left out (the real kernel on rows one id shorter).
std::vector<KernelCase> embed_sum_cases(uint64_t seed, Fault fault) {
  std::vector<KernelCase> cases;
  const int64_t shapes[][3] = {{5, 64, 8}, {3, 100, 3}};  // rows, dim, ids per row
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 13 + s);
    const int64_t rows = shapes[s][0], dim = shapes[s][1], per = shapes[s][2], vocab = 300;
    auto table = std::make_shared<std::vector<uint16_t>>(to_bf16_vec(rng.normals(vocab * dim)));
    auto ids = std::make_shared<std::vector<int32_t>>(rows * per);
    for (auto& i : *ids) i = static_cast<int32_t>(rng.integer(0, vocab - 1));
    KernelCase c;
    c.label = "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim) +
              " ids=" + std::to_string(per);
    c.rows = rows;
    c.row_elems = dim;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        double ref = 0, mag = 0;
        double deg = 0;  // a float16 accumulator
        for (int64_t j = 0; j < per; ++j) {
          const double t = bf16_to_f32((*table)[(*ids)[r * per + j] * dim + d]);
          ref += t;
          mag += std::fabs(t);
          deg = to_f16(deg + to_f16(t));
        }
        c.reference.push_back(ref);
        c.degraded.push_back(static_cast<double>(deg));
        c.atol.push_back(gamma32(double(per)) * mag);
      }
    c.nmse_limit = 32.0 * double(per) * kU32 * kU32;
    c.input_norms = {l2(*table)};
    c.run = [table, ids, dim, per, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      if (fault == Fault::MissingLastId) {
        std::vector<int32_t> shorter;
        for (int64_t r = 0; r < n; ++r)
          shorter.insert(shorter.end(), ids->begin() + (r0 + r) * per,
                         ids->begin() + (r0 + r + 1) * per - 1);
        DeviceCopies d(b);
        b.embed_sum(d.in(*table), dim, d.in(shorter), n, per - 1, out);
        return true;
      }
      DeviceCopies d(b);
      b.embed_sum(d.in(*table), dim, d.in(*ids) + r0 * per, n, per, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// rms_norm: sum of squares (gamma_dim relative), mean, +eps, sqrt (halves the relative error),
// divide, two multiplies: relative error <= gamma_dim / 2 + 6u per element; NMSE limit its square.
// Twin: output rounded to float16 (relative 2^-12 > the bound for dim <= 4096).
std::vector<KernelCase> rms_norm_cases(uint64_t seed, Fault fault) {
  std::vector<KernelCase> cases;
  const int64_t shapes[][2] = {{5, 64}, {3, 1000}, {1, 2048}};
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 19 + s);
    const int64_t rows = shapes[s][0], dim = shapes[s][1];
    auto x = std::make_shared<std::vector<float>>(rng.normals(rows * dim, 0.0, 3.0));
    std::vector<float> wf = rng.normals(dim, 1.0, 0.2);
    auto w = std::make_shared<std::vector<uint16_t>>(to_bf16_vec(wf));
    const double eps = 1e-6;
    KernelCase c;
    c.label = "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim);
    c.rows = rows;
    c.row_elems = dim;
    c.rtol = gamma32(double(dim)) / 2 + 6 * kU32;
    c.nmse_limit = c.rtol * c.rtol;
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t d = 0; d < dim; ++d) ss += double((*x)[r * dim + d]) * (*x)[r * dim + d];
      const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
      for (int64_t d = 0; d < dim; ++d) {
        const double y = (*x)[r * dim + d] * inv * bf16_to_f32((*w)[d]);
        c.reference.push_back(y);
        c.degraded.push_back(to_f16(y));
      }
    }
    c.atol.assign(c.reference.size(), 0.0);
    c.input_norms = {l2(*x), l2(wf)};
    c.run = [x, w, dim, eps, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      b.rms_norm(d.in(*x) + r0 * dim, d.in(*w), n, dim, static_cast<float>(eps), out);
      if (fault == Fault::Unwritten) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        b.upload(out + n * dim - 1, &nan, sizeof nan);  // as if the last element were skipped
      }
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// rope: y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin with the angle pos * theta^(-2i/d) reduced
// accurately (positions up to 8191): |err| <= 8u (|x1| + |x2|). Twin: cos and sin in float16.
std::vector<KernelCase> rope_cases(uint64_t seed, Fault fault) {
  std::vector<KernelCase> cases;
  const int64_t shapes[][3] = {{5, 4, 64}, {2, 8, 128}, {3, 2, 16}};  // rows, heads, head_dim
  const double thetas[] = {1e6, 1e4, 1e4};
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 23 + s);
    const int64_t rows = shapes[s][0], heads = shapes[s][1], hd = shapes[s][2], half = hd / 2;
    const double theta = thetas[s];
    auto x = std::make_shared<std::vector<float>>(rng.normals(rows * heads * hd));
    auto pos = std::make_shared<std::vector<int32_t>>(rows);
    for (auto& p : *pos) p = static_cast<int32_t>(rng.integer(0, 8191));
    KernelCase c;
    c.label = "rows=" + std::to_string(rows) + " heads=" + std::to_string(heads) +
              " head_dim=" + std::to_string(hd);
    c.rows = rows;
    c.row_elems = heads * hd;
    c.reference.resize(x->size());
    c.degraded.resize(x->size());
    c.atol.resize(x->size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = (r * heads + h) * hd + i, b2 = a + half;
          const double ang = double((*pos)[r]) * std::pow(theta, -2.0 * double(i) / double(hd));
          const double co = std::cos(ang), si = std::sin(ang), x1 = (*x)[a], x2 = (*x)[b2];
          c.reference[a] = x1 * co - x2 * si;
          c.reference[b2] = x2 * co + x1 * si;
          c.degraded[a] = x1 * to_f16(co) - x2 * to_f16(si);
          c.degraded[b2] = x2 * to_f16(co) + x1 * to_f16(si);
          c.atol[a] = c.atol[b2] = 8 * kU32 * (std::fabs(x1) + std::fabs(x2));
        }
    c.nmse_limit = 64 * kU32 * kU32;
    c.input_norms = {l2(*x)};
    c.run = [x, pos, heads, hd, theta, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      const int64_t per = heads * hd;
      stage(b, out, x->data() + r0 * per, n * per);
      if (fault != Fault::WrongRotaryPair) {
        DeviceCopies d(b);
        b.rope(out, n, heads, hd, d.in(*pos) + r0, static_cast<float>(theta));
        return true;
      }
      std::vector<float> y(x->begin() + r0 * per, x->begin() + (r0 + n) * per);
      for (int64_t r = 0; r < n; ++r)  // interleaved pairs: the GPT-J convention, not ours
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < hd / 2; ++i) {
            const double ang =
                double((*pos)[r0 + r]) * std::pow(theta, -2.0 * double(i) / double(hd));
            float* p = y.data() + (r * heads + h) * hd + 2 * i;
            const float x1 = p[0], x2 = p[1];
            p[0] = static_cast<float>(x1 * std::cos(ang) - x2 * std::sin(ang));
            p[1] = static_cast<float>(x2 * std::cos(ang) + x1 * std::sin(ang));
          }
      stage(b, out, y.data(), n * per);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// qk_norm_rope_cache: per head, rms_norm (relative rho = gamma_hd / 2 + 6u per element) then the
// rotary, whose 8u (|a| + |b|) adds to the inputs' rho (|a| + |b|): |err| <= (8u + rho)(|a| + |b|)
// over the normed pair; the cache rows are copies (k's of the rotated values, v's exact). Output
// per row: q's heads, k's heads, then cache rows kv_row[r] of k and v. Cache rows no row names
// must stay untouched. Twin: everything rounded to float16 (2^-12 relative > the bound).
// Planted fault: k stored into the cache before its rotary (the real kernels in that order).
std::vector<KernelCase> qk_norm_rope_cache_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, heads, kv_heads, hd;
    double theta;
  };
  const Shape shapes[] = {
      {1, 4, 2, 64, 1e6}, {5, 8, 2, 128, 1e6}, {3, 2, 2, 16, 1e4}, {9, 32, 4, 128, 1e6}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 31 + s);
    const int64_t qd = sh.heads * sh.hd, kvd = sh.kv_heads * sh.hd, half = sh.hd / 2;
    const int64_t cache_rows = sh.rows + 3;
    auto q = std::make_shared<std::vector<float>>(rng.normals(sh.rows * qd, 0.0, 2.0));
    auto k = std::make_shared<std::vector<float>>(rng.normals(sh.rows * kvd, 0.0, 2.0));
    auto v = std::make_shared<std::vector<float>>(rng.normals(sh.rows * kvd));
    std::vector<float> qwf = rng.normals(sh.hd, 1.0, 0.2), kwf = rng.normals(sh.hd, 1.0, 0.2);
    auto qw = std::make_shared<std::vector<uint16_t>>(to_bf16_vec(qwf));
    auto kw = std::make_shared<std::vector<uint16_t>>(to_bf16_vec(kwf));
    auto pos = std::make_shared<std::vector<int32_t>>(sh.rows);
    for (auto& p : *pos) p = static_cast<int32_t>(rng.integer(0, 8191));
    std::vector<int32_t> perm(cache_rows);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    auto kv_row = std::make_shared<std::vector<int32_t>>(perm.begin(), perm.begin() + sh.rows);
    const double eps = 1e-6;
    const double rho = gamma32(double(sh.hd)) / 2 + 6 * kU32;
    KernelCase c;
    c.label = "rows=" + std::to_string(sh.rows) + " heads=" + std::to_string(sh.heads) + "/" +
              std::to_string(sh.kv_heads) + " head_dim=" + std::to_string(sh.hd);
    c.rows = sh.rows;
    c.row_elems = qd + 3 * kvd;
    c.reference.resize(static_cast<size_t>(c.rows * c.row_elems));
    c.atol.resize(c.reference.size());
    // One head at x (n values) normed with w and rotated at `p`: into ref / atol at `at`.
    auto head = [&](const float* x, const std::vector<uint16_t>& w, int32_t p, size_t at) {
      double ss = 0;
      for (int64_t d = 0; d < sh.hd; ++d) ss += double(x[d]) * x[d];
      const double inv = 1.0 / std::sqrt(ss / double(sh.hd) + eps);
      std::vector<double> xn(sh.hd);
      for (int64_t d = 0; d < sh.hd; ++d) xn[d] = x[d] * inv * bf16_to_f32(w[d]);
      for (int64_t i = 0; i < half; ++i) {
        const double ang = double(p) * std::pow(sh.theta, -2.0 * double(i) / double(sh.hd));
        const double a = xn[i], b = xn[i + half];
        c.reference[at + i] = a * std::cos(ang) - b * std::sin(ang);
        c.reference[at + i + half] = b * std::cos(ang) + a * std::sin(ang);
        c.atol[at + i] = c.atol[at + i + half] = (8 * kU32 + rho) * (std::fabs(a) + std::fabs(b));
      }
    };
    for (int64_t r = 0; r < sh.rows; ++r) {
      const size_t row = static_cast<size_t>(r * c.row_elems);
      for (int64_t h = 0; h < sh.heads; ++h)
        head(q->data() + (r * sh.heads + h) * sh.hd, *qw, (*pos)[r], row + h * sh.hd);
      for (int64_t h = 0; h < sh.kv_heads; ++h) {
        const size_t at = row + qd + h * sh.hd;
        head(k->data() + (r * sh.kv_heads + h) * sh.hd, *kw, (*pos)[r], at);
        for (int64_t d = 0; d < sh.hd; ++d) {
          c.reference[at + kvd + d] = c.reference[at + d];  // the cache's copy of k
          c.atol[at + kvd + d] = c.atol[at + d];
          c.reference[at + 2 * kvd + d] = (*v)[(r * sh.kv_heads + h) * sh.hd + d];
          c.atol[at + 2 * kvd + d] = 0;
        }
      }
    }
    for (double x : c.reference) c.degraded.push_back(to_f16(x));
    c.nmse_limit = 4 * (8 * kU32 + rho) * (8 * kU32 + rho);
    c.input_norms = {l2(*q), l2(*k), l2(*v), l2(qwf), l2(kwf)};
    c.run = [q, k, v, qw, kw, pos, kv_row, sh, qd, kvd, cache_rows, eps, fault](
                Backend& b, int64_t r0, int64_t n, float* out) {
      constexpr uint32_t kPayload = 0x7fc0c0deu;
      std::vector<uint32_t> kc_host(static_cast<size_t>(cache_rows * kvd), kPayload),
          vc_host = kc_host;
      std::vector<float> qh(q->begin() + r0 * qd, q->begin() + (r0 + n) * qd);
      std::vector<float> kh(k->begin() + r0 * kvd, k->begin() + (r0 + n) * kvd);
      {
        DeviceCopies d(b);
        float* qd_dev = d.output(qh.data(), qh.size());
        float* kd_dev = d.output(kh.data(), kh.size());
        float* kc = reinterpret_cast<float*>(d.output(kc_host.data(), kc_host.size()));
        float* vc = reinterpret_cast<float*>(d.output(vc_host.data(), vc_host.size()));
        const float* vd = d.in(v->data() + r0 * kvd, static_cast<size_t>(n * kvd));
        const uint16_t *qwd = d.in(*qw), *kwd = d.in(*kw);
        const int32_t* pd = d.in(*pos) + r0;
        const int32_t* rowd = d.in(*kv_row) + r0;
        const float e = static_cast<float>(eps), th = static_cast<float>(sh.theta);
        if (fault == Fault::CacheBeforeRotary) {
          b.rms_norm(qd_dev, qwd, n * sh.heads, sh.hd, e, qd_dev);
          b.rms_norm(kd_dev, kwd, n * sh.kv_heads, sh.hd, e, kd_dev);
          b.copy_rows(kd_dev, nullptr, kc, rowd, n, kvd);
          b.rope(qd_dev, n, sh.heads, sh.hd, pd, th);
          b.rope(kd_dev, n, sh.kv_heads, sh.hd, pd, th);
          b.copy_rows(vd, nullptr, vc, rowd, n, kvd);
        } else {
          b.qk_norm_rope_cache(qd_dev, kd_dev, vd, n, sh.heads, sh.kv_heads, sh.hd, qwd, kwd, e, pd,
                               th, rowd, kc, vc);
        }
        d.finish();
      }
      std::vector<bool> owned(static_cast<size_t>(cache_rows), false);
      for (int64_t i = 0; i < n; ++i) owned[(*kv_row)[r0 + i]] = true;
      bool untouched = true;
      for (int64_t row = 0; row < cache_rows; ++row)
        if (!owned[row])
          for (int64_t e = 0; e < kvd; ++e)
            untouched = untouched && kc_host[row * kvd + e] == kPayload &&
                        vc_host[row * kvd + e] == kPayload;
      const int64_t per = qd + 3 * kvd;
      std::vector<float> host(static_cast<size_t>(n * per));
      for (int64_t i = 0; i < n; ++i) {
        float* o = host.data() + i * per;
        const int64_t cr = (*kv_row)[r0 + i];
        std::memcpy(o, qh.data() + i * qd, static_cast<size_t>(qd) * sizeof(float));
        std::memcpy(o + qd, kh.data() + i * kvd, static_cast<size_t>(kvd) * sizeof(float));
        std::memcpy(o + qd + kvd, kc_host.data() + cr * kvd, static_cast<size_t>(kvd) * 4);
        std::memcpy(o + qd + 2 * kvd, vc_host.data() + cr * kvd, static_cast<size_t>(kvd) * 4);
      }
      // The payload reads as NaN: an unwritten cache row fails gate 1.
      stage(b, out, host.data(), n * per);
      return untouched;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// attention: scores s_j = q.k_j / sqrt(d) carry e_j <= gamma_{d+1} sum|q||k_j| / sqrt(d); the
// softmax turns them into relative errors of p_j of at most 2 max_j e_j + (2L + 8)u (exp,
// normalising sum of L terms, divide); the weighted sum of L values adds gamma_L. So per element
// |err| <= sum_j p_j |v_j| * (2 max e + (2L + 8)u + gamma_L). NMSE limit 4 ((d + 3L + 16) u)^2.
// Twin: scores and probabilities rounded to float16.
// Cases with several sequences in one call give each row its sequence's cache through
// cache_row0 (caches in slots of `cap` rows, in shuffled slot order, rows of the sequences
// interleaved, each sequence at its own positions); the others use the nullable single-sequence
// form. Every case keeps one spare slot of random keys and values beyond the sequences' slots, so
// a row that reads a neighbour's cache reads real, different data.
std::vector<KernelCase> attention_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, nh, nkv, hd, first_pos, window, seqs;
    bool table;  // cache_row0 given (else null: one sequence from cache row 0)
  };
  const Shape shapes[] = {{1, 4, 2, 64, 37, 0, 1, false},    {5, 8, 2, 16, 0, 0, 1, false},
                          {3, 8, 8, 64, 300, 250, 1, false}, {2, 32, 4, 128, 100, 0, 1, false},
                          {4, 4, 1, 32, 10, 3, 1, false},    {6, 8, 2, 16, 20, 0, 3, true},
                          {5, 4, 4, 64, 40, 8, 2, true},     {9, 32, 4, 128, 60, 0, 4, true},
                          {1, 4, 2, 32, 12, 0, 1, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 29 + s);
    // Rows go to sequences in turn; each sequence starts at its own position (the first at
    // first_pos) and its rows take consecutive positions (a prefill chunk or one decode row).
    std::vector<int64_t> seq_of(sh.rows), start(sh.seqs), used(sh.seqs, 0);
    for (int64_t q = 0; q < sh.seqs; ++q)
      start[q] = q == 0 ? sh.first_pos : rng.integer(0, sh.first_pos);
    auto pos = std::make_shared<std::vector<int32_t>>(sh.rows);
    int64_t cap = 0;
    for (int64_t r = 0; r < sh.rows; ++r) {
      seq_of[r] = r % sh.seqs;
      (*pos)[r] = static_cast<int32_t>(start[seq_of[r]] + used[seq_of[r]]++);
      cap = std::max<int64_t>(cap, (*pos)[r] + 1);
    }
    cap += 2;
    const int64_t slots = sh.seqs + 1 + (sh.table && sh.seqs == 1 ? 1 : 0);
    std::vector<int64_t> slot(slots);
    std::iota(slot.begin(), slot.end(), 0);
    if (sh.table) std::shuffle(slot.begin(), slot.end(), rng.gen);
    // The spare slot (the neighbour a faulty row reads) follows its sequence's slot.
    auto row0 = std::make_shared<std::vector<int32_t>>(sh.rows);
    for (int64_t r = 0; r < sh.rows; ++r) (*row0)[r] = static_cast<int32_t>(slot[seq_of[r]] * cap);
    auto q = std::make_shared<std::vector<float>>(rng.normals(sh.rows * sh.nh * sh.hd));
    auto k = std::make_shared<std::vector<float>>(rng.normals(slots * cap * sh.nkv * sh.hd));
    auto v = std::make_shared<std::vector<float>>(rng.normals(slots * cap * sh.nkv * sh.hd));
    KernelCase c;
    c.label = "rows=" + std::to_string(sh.rows) + " heads=" + std::to_string(sh.nh) + "/" +
              std::to_string(sh.nkv) + " head_dim=" + std::to_string(sh.hd) +
              " pos=" + std::to_string(sh.first_pos) + " window=" + std::to_string(sh.window) +
              (sh.table ? " seqs=" + std::to_string(sh.seqs) + " cache_row0" : " one sequence");
    c.rows = sh.rows;
    c.row_elems = sh.nh * sh.hd;
    const double scale = 1.0 / std::sqrt(double(sh.hd));
    int64_t max_len = 0;
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t h = 0; h < sh.nh; ++h) {
        const int64_t kvh = h / (sh.nh / sh.nkv), p = (*pos)[r];
        const int64_t base = sh.table ? (*row0)[r] : 0;
        const int64_t lo = sh.window > 0 ? std::max<int64_t>(0, p - sh.window + 1) : 0;
        const int64_t L = p - lo + 1;
        max_len = std::max(max_len, L);
        std::vector<double> sc(L), sc16(L);
        double emax = 0;
        for (int64_t j = 0; j < L; ++j) {
          double dot = 0, mag = 0;
          for (int64_t d = 0; d < sh.hd; ++d) {
            const double qq = (*q)[(r * sh.nh + h) * sh.hd + d];
            const double kk = (*k)[((base + lo + j) * sh.nkv + kvh) * sh.hd + d];
            dot += qq * kk;
            mag += std::fabs(qq * kk);
          }
          sc[j] = dot * scale;
          sc16[j] = to_f16(sc[j]);
          emax = std::max(emax, gamma32(double(sh.hd + 1)) * mag * scale);
        }
        auto softmax = [](std::vector<double> z, bool f16) {
          const double m = *std::max_element(z.begin(), z.end());
          double sum = 0;
          for (auto& e : z) sum += (e = std::exp(e - m));
          for (auto& e : z) e = f16 ? to_f16(e / sum) : e / sum;
          return z;
        };
        const std::vector<double> pr = softmax(sc, false), p16 = softmax(sc16, true);
        for (int64_t d = 0; d < sh.hd; ++d) {
          double o = 0, o16 = 0, mag = 0;
          for (int64_t j = 0; j < L; ++j) {
            const double vv = (*v)[((base + lo + j) * sh.nkv + kvh) * sh.hd + d];
            o += pr[j] * vv;
            o16 += p16[j] * vv;
            mag += pr[j] * std::fabs(vv);
          }
          c.reference.push_back(o);
          c.degraded.push_back(o16);
          c.atol.push_back(mag * (2 * emax + double(2 * L + 8) * kU32 + gamma32(double(L))));
        }
      }
    const double t = double(sh.hd + 3 * max_len + 16) * kU32;
    c.nmse_limit = 4 * t * t;
    c.input_norms = {l2(*q), l2(*k), l2(*v)};
    // Planted faults: a window one position wider, or every row one slot over (a neighbour's
    // cache: the spare slot or another sequence's).
    const int64_t window =
        fault == Fault::WindowPlusOne && sh.window > 0 ? sh.window + 1 : sh.window;
    if (fault == Fault::NeighbourCache)
      for (int64_t r = 0; r < sh.rows; ++r)
        (*row0)[r] = static_cast<int32_t>(((*row0)[r] / cap + 1) % slots * cap);
    const bool table = sh.table || fault == Fault::NeighbourCache;
    c.run = [q, k, v, pos, row0, sh, window, table](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      b.attention(d.in(*q) + r0 * sh.nh * sh.hd, n, d.in(*pos) + r0,
                  table ? d.in(*row0) + r0 : nullptr, d.in(*k), d.in(*v), sh.nh, sh.nkv, sh.hd,
                  window, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// sigmoid: 1 / (1 + exp(-x)): exp within 1 ulp (2u), the add and the divide one rounding each;
// exp's relative error shrinks through 1 + exp(-x), so |err| <= 4u |y|; bound 6u relative.
// Inputs N(0, 2.5): the flat tails are few (where exp(-x) overflows float16 and a twin would
// hide). NMSE limit 16 (6u)^2. Twin: float16 intermediates.
std::vector<KernelCase> sigmoid_cases(uint64_t seed, Fault fault) {
  std::vector<KernelCase> cases;
  const int64_t shapes[][2] = {{kSliceRows, kSliceLen}, {1, 1}, {5, 67}};  // rows, row length
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 43 + s);
    const int64_t rows = shapes[s][0], len = shapes[s][1], n = rows * len;
    auto x = std::make_shared<std::vector<float>>(rng.normals(n, 0.0, 2.5));
    KernelCase c;
    c.label = "n=" + std::to_string(n) + " as " + std::to_string(rows) + " slices";
    c.rows = rows;
    c.row_elems = len;
    c.rtol = 6 * kU32;
    c.nmse_limit = 16 * c.rtol * c.rtol;
    auto f16 = [](double v) {
      const double h = to_f16(v);
      return to_f16(1.0 / to_f16(1.0 + to_f16(std::exp(-h))));
    };
    for (int64_t i = 0; i < n; ++i) {
      const double xx = (*x)[i];
      c.reference.push_back(1.0 / (1.0 + std::exp(-xx)));
      c.degraded.push_back(f16(xx));
    }
    c.atol.assign(c.reference.size(), 0.0);
    c.input_norms = {l2(*x)};
    c.run = [x, len, fault, f16](Backend& b, int64_t r0, int64_t rows_n, float* out) {
      if (fault == Fault::Fp16Intermediates) {
        const float* in = x->data() + r0 * len;
        std::vector<float> y(static_cast<size_t>(rows_n * len));
        for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(f16(in[i]));
        stage(b, out, y.data(), rows_n * len);
        return true;
      }
      DeviceCopies d(b);
      b.sigmoid(d.in(*x) + r0 * len, rows_n * len, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// swiglu: silu(g) * u with g centred near 1 (not deep in the sigmoid's flat tails, where a
// float16 overflow once hid): exp, add, divide and two multiplies, 8u relative (vector exp within
// 3 ulp). Twin: float16 intermediates.
std::vector<KernelCase> swiglu_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 37);
  const int64_t n = kSliceRows * kSliceLen;
  auto g = std::make_shared<std::vector<float>>(rng.normals(n, 1.0, 0.5));
  auto u = std::make_shared<std::vector<float>>(rng.normals(n));
  KernelCase c;
  c.label = "n=" + std::to_string(n) + " as " + std::to_string(kSliceRows) + " slices";
  c.rows = kSliceRows;
  c.row_elems = kSliceLen;
  c.rtol = 8 * kU32;
  c.nmse_limit = c.rtol * c.rtol;
  for (int64_t i = 0; i < n; ++i) {
    const double gg = (*g)[i], uu = (*u)[i];
    c.reference.push_back(gg / (1.0 + std::exp(-gg)) * uu);
    const double g16 = to_f16(gg);
    c.degraded.push_back(to_f16(to_f16(g16 / to_f16(1.0 + to_f16(std::exp(-g16)))) * to_f16(uu)));
  }
  c.atol.assign(c.reference.size(), 0.0);
  c.input_norms = {l2(*g), l2(*u)};
  c.run = [g, u, fault](Backend& b, int64_t r0, int64_t rows, float* out) {
    if (fault == Fault::Fp16Accumulation) {
      std::vector<float> y(static_cast<size_t>(rows * kSliceLen));
      for (int64_t i = 0; i < rows * kSliceLen; ++i) {
        const double gg = to_f16((*g)[r0 * kSliceLen + i]);
        const double sig = to_f16(1.0 / (1.0 + std::exp(-gg)));
        y[i] = static_cast<float>(to_f16(to_f16(gg * sig) * to_f16((*u)[r0 * kSliceLen + i])));
      }
      stage(b, out, y.data(), rows * kSliceLen);
      return true;
    }
    DeviceCopies d(b);
    b.swiglu(d.in(*g) + r0 * kSliceLen, d.in(*u) + r0 * kSliceLen, rows * kSliceLen, out);
    return true;
  };
  return {c};
}

// add: y + x rounded once to float32 is the correctly rounded sum: exact mode. Twin: bfloat16.
// Planted fault: the sum rounded toward zero (a last-bit error in about half of the elements).
std::vector<KernelCase> add_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 41);
  const int64_t n = kSliceRows * kSliceLen;
  auto x = std::make_shared<std::vector<float>>(rng.normals(n));
  auto y = std::make_shared<std::vector<float>>(rng.normals(n, 0.0, 4.0));
  KernelCase c;
  c.label = "n=" + std::to_string(n) + " as " + std::to_string(kSliceRows) + " slices";
  c.rows = kSliceRows;
  c.row_elems = kSliceLen;
  c.exact = true;
  for (int64_t i = 0; i < n; ++i) {
    c.reference.push_back(double((*y)[i]) + double((*x)[i]));
    c.degraded.push_back(to_bf16(c.reference.back()));
  }
  c.input_norms = {l2(*x), l2(*y)};
  c.run = [x, y, fault](Backend& b, int64_t r0, int64_t rows, float* out) {
    const int64_t n = rows * kSliceLen;
    if (fault == Fault::TruncatedAdd) {
      std::vector<float> t(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const double sum = double((*y)[r0 * kSliceLen + i]) + (*x)[r0 * kSliceLen + i];
        float f = static_cast<float>(sum);
        if (std::fabs(double(f)) > std::fabs(sum)) f = std::nextafter(f, 0.0f);
        t[i] = f;
      }
      stage(b, out, t.data(), n);
      return true;
    }
    stage(b, out, y->data() + r0 * kSliceLen, n);
    DeviceCopies d(b);
    b.add(d.in(*x) + r0 * kSliceLen, n, out);
    return true;
  };
  return {c};
}

Limit attention_limit() {
  Limit l;
  l.size = "decode rows=1 heads=32/4 head_dim=128 pos=2047";
  const int64_t nh = 32, nkv = 4, hd = 128, cap = 2048;
  l.bytes = double(2 * cap * nkv * hd * 4);
  l.flops = 4.0 * nh * cap * hd;  // q.k and p.v
  l.factor = 8.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(3);
    std::vector<float> q = rng.normals(nh * hd), k = rng.normals(cap * nkv * hd),
                       v = rng.normals(cap * nkv * hd), o(nh * hd);
    const std::vector<int32_t> pos = {static_cast<int32_t>(cap - 1)};
    DeviceCopies d(b);
    const float *qd = d.in(q), *kd = d.in(k), *vd = d.in(v);
    const int32_t* pd = d.in(pos);
    float* od = d.output(o.data(), o.size());
    return median_seconds(7, [&] {
      b.attention(qd, 1, pd, nullptr, kd, vd, nh, nkv, hd, 0, od);
      b.synchronize();
    });
  };
  return l;
}

// Elementwise and small kernels: a stated size of 1M elements, limited to 8x the floor of their
// traffic (copy bandwidth) or arithmetic (scalar multiply-add rate; transcendental functions
// counted at the operations of a polynomial evaluation: exp 12, erf 24) plus 0.2 ms of overhead.
Limit elementwise_limit(const char* kernel) {
  Limit l;
  const int64_t n = 1 << 20;
  const std::string name = kernel;
  l.size = "n=1048576";
  l.bytes = double(n) * 12;
  const double per_element = name == "gelu"                               ? 30
                             : name == "swiglu"                           ? 16
                             : name == "elu" || name == "sigmoid"         ? 14
                             : name == "layer_norm" || name == "rms_norm" ? 6
                             : name == "qk_norm_rope_cache"               ? 10
                             : name == "rope"                             ? 4
                                                                          : 1;
  l.flops = double(n) * per_element;
  l.factor = 8.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(5);
    std::vector<float> xh = rng.normals(n, 1.0, 0.5), yh = rng.normals(n), oh(n);
    const std::vector<uint16_t> wh = to_bf16_vec(rng.normals(1024, 1.0, 0.1));
    const std::vector<int32_t> posh(n / 1024, 77);
    DeviceCopies d(b);
    const float *x = d.in(xh), *y = d.in(yh);
    const uint16_t* w = d.in(wh);
    const int32_t* pos = d.in(posh);
    float* o = d.in(oh);
    const std::vector<GuidanceRow> guidance_host = {{0, 1, 1.5f}, {1, 0, 1.5f}};
    const GuidanceRow* guidance_rows = d.in(guidance_host);
    const std::vector<SampleRow> greedy_host = {SampleRow{0.0f, 0, 1.0f, 0, 0, 0}};
    const SampleRow* greedy = d.in(greedy_host);
    int32_t* id_flag = d.in(std::vector<int32_t>{0, 0});
    std::vector<int32_t> kv_rows_host(256);
    std::iota(kv_rows_host.begin(), kv_rows_host.end(), 0);
    const int32_t* kv_rows = d.in(kv_rows_host);
    return median_seconds(5, [&] {
      if (name == "swiglu") b.swiglu(x, y, n, o);
      if (name == "add") b.add(x, n, o);
      if (name == "sigmoid") b.sigmoid(x, n, o);
      if (name == "elu") b.elu(x, n, 1.0f, o);
      if (name == "gelu") b.gelu(x, n, o);
      // Two rows of n / 2 logits combined into one, twice over (n elements read in all).
      if (name == "guidance_combine") b.guidance_combine(x, n / 2, guidance_rows, 2, o);
      if (name == "rms_norm") b.rms_norm(x, w, n / 1024, 1024, 1e-6f, o);
      if (name == "scale_rows") b.scale_rows(x, y, n / 1024, 1024, o);
      if (name == "non_finite_guard") b.sample_rows(x, n, greedy, 1, 0, id_flag, id_flag + 1, 1);
      if (name == "layer_norm") b.layer_norm(x, y, y + 1024, n / 1024, 1024, 1e-5f, o);
      if (name == "rope") b.rope(o, n / 1024, 8, 128, pos, 1e6f);
      // 256 rows of 16 q heads and 4 kv heads of 128: q, k, the caches in o; v in x.
      if (name == "qk_norm_rope_cache")
        b.qk_norm_rope_cache(o, o + 256 * 2048, x, 256, 16, 4, 128, w, w, 1e-6f, pos, 1e6f, kv_rows,
                             o + 256 * 2560, o + 256 * 3072);
      b.synchronize();
    });
  };
  return l;
}

}  // namespace drama::contract

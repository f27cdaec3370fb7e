// Mixture of experts: routing, the routed experts as one call, and the expert combine.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "contract/kernels.h"
#include "contract/registry_util.h"

namespace drama::contract {

// route_topk: stored indices must be exact (bound 0); weights come from a float32 softmax over
// n stored experts (exp, a sum of n terms, divide) and an optional renormalisation over k:
// relative (n + k + 12) u. The first row of every case holds a near-tie (logits 4.0015 at the
// higher original id, 4.0014 at the lower) that float16 logits, the twin, cannot tell apart.
std::vector<KernelCase> route_topk_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, num_experts, stored, k;
    bool sliced, norm, shuffled;  // shuffled: stored experts not in increasing original id
  };
  const Shape shapes[] = {{5, 64, 64, 4, false, true, false},
                          {4, 64, 12, 4, false, false, false},
                          {3, 64, 12, 2, true, true, false},
                          {6, 128, 128, 8, false, true, false},
                          {4, 128, 40, 8, false, true, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 43 + s);
    auto orig = std::make_shared<std::vector<int32_t>>();
    std::vector<int32_t> all(sh.num_experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.gen);
    orig->assign(all.begin(), all.begin() + sh.stored);
    if (!sh.shuffled) std::sort(orig->begin(), orig->end());
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
              (sh.sliced ? " sliced" : " full") + (sh.norm ? " norm" : "") +
              (sh.shuffled ? " shuffled" : "");
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
        // Higher probability first, then lower original id (spec: routing by original id).
        std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return z[x] > z[y] || (z[x] == z[y] && (*orig)[x] < (*orig)[y]);
        });
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
      {
        DeviceCopies d(b);
        int32_t* idx_dev = d.output(idx.buf.data(), idx.buf.size()) + 8;
        b.route_topk(d.in(*logits) + r0 * stride, n, stride, d.in(*column), d.in(*orig), sh.stored,
                     k, sh.norm, idx_dev, d.output(w.data(), w.size()));
        d.finish();
      }
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
// element; NMSE limit 32 (2k+1) u^2. Twin: float16 accumulation. Planted fault: rank j weighted by
// rank j+1's weight (the real kernel on a rotated weight table). expert_sum (from_zero) is the
// same sum started from zero, y never read (the harness's NaN fill stays out of it): the same
// bound with |y| = 0. Its planted fault: the sum added to what y held (expert_combine on an
// unzeroed y). expert_sum_add (add_after) adds that sum to y: the sum's bound e, then one
// rounding, |err| <= (1 + u) e + u |ref|; NMSE limit 32 (2k + 2) u^2. Its planted fault: the sum
// stored over y (expert_sum), the add left out.
namespace {
// The experts' outputs e [rows, k, dim], their weights w [rows, k] in [0.05, 0.6) and a residual y
// [rows, dim] of normals with deviation y_sigma, drawn in that order.
struct CombineInputs {
  std::shared_ptr<std::vector<float>> e, w, y;
};
CombineInputs combine_inputs(Rng& rng, int64_t rows, int64_t k, int64_t dim, double y_sigma) {
  CombineInputs in;
  in.e = std::make_shared<std::vector<float>>(rng.normals(rows * k * dim));
  in.w = std::make_shared<std::vector<float>>(rows * k);
  for (auto& x : *in.w) x = static_cast<float>(rng.uniform(0.05, 0.6));
  in.y = std::make_shared<std::vector<float>>(rng.normals(rows * dim, 0.0, y_sigma));
  return in;
}

std::vector<KernelCase> combine_cases(uint64_t seed, Fault fault, bool from_zero,
                                      bool add_after = false) {
  const int64_t shapes[][3] = {{5, 4, 100}, {2, 8, 64}, {1, 2, 33}};  // rows, k, dim
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 47 + s);
    const int64_t rows = shapes[s][0], k = shapes[s][1], dim = shapes[s][2];
    const CombineInputs in = combine_inputs(rng, rows, k, dim, 1.0);
    const auto e = in.e, w = in.w, y = in.y;  // named copies: clang 14 cannot capture bindings
    KernelCase c;
    c.label =
        "rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " dim=" + std::to_string(dim);
    c.rows = rows;
    c.row_elems = dim;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        double ref = from_zero ? 0.0 : (*y)[r * dim + d], mag = std::fabs(ref);
        double deg = to_f16(ref);  // a float16 accumulator
        for (int64_t j = 0; j < k; ++j) {
          const double p = double((*w)[r * k + j]) * (*e)[(r * k + j) * dim + d];
          ref += p;
          mag += std::fabs(p);
          deg = to_f16(deg + to_f16(p));
        }
        const double bound = gamma32(double(2 * k + 1)) * mag;
        if (add_after) {
          const double y0 = (*y)[r * dim + d];
          ref += y0;
          deg += y0;
          c.atol.push_back((1 + kU32) * bound + kU32 * std::fabs(ref));
        } else {
          c.atol.push_back(bound);
        }
        c.reference.push_back(ref);
        c.degraded.push_back(double(deg));
      }
    c.nmse_limit = 32.0 * double(2 * k + 1 + (add_after ? 1 : 0)) * kU32 * kU32;
    c.input_norms = {l2(*e), l2(*w)};
    if (!from_zero || add_after) c.input_norms.push_back(l2(*y));
    c.run = [e, w, y, k, dim, fault, from_zero, add_after](Backend& b, int64_t r0, int64_t n,
                                                           float* out) {
      if (!from_zero || fault == Fault::SumOnUnzeroedOutput ||
          (add_after && fault != Fault::ResidualLeftOut))
        stage(b, out, y->data() + r0 * dim, n * dim);
      std::vector<float> wt(w->begin() + r0 * k, w->begin() + (r0 + n) * k);
      if (fault == Fault::NeighbourRankWeight)
        for (int64_t r = 0; r < n; ++r) std::rotate(&wt[r * k], &wt[r * k + 1], &wt[r * k] + k);
      DeviceCopies d(b);
      if (add_after && fault != Fault::ResidualLeftOut) {
        auto scratch = b.alloc(static_cast<size_t>(n * dim) * sizeof(float));
        b.expert_sum_add(d.in(*e) + r0 * k * dim, d.in(wt), n, k, dim, scratch->f32(), out);
      } else if (from_zero && fault != Fault::SumOnUnzeroedOutput)
        b.expert_sum(d.in(*e) + r0 * k * dim, d.in(wt), n, k, dim, out);
      else
        b.expert_combine(d.in(*e) + r0 * k * dim, d.in(wt), n, k, dim, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}
}  // namespace

std::vector<KernelCase> expert_combine_cases(uint64_t seed, Fault fault) {
  return combine_cases(seed, fault, false);
}

std::vector<KernelCase> expert_sum_cases(uint64_t seed, Fault fault) {
  return combine_cases(seed, fault, true);
}

std::vector<KernelCase> expert_sum_add_cases(uint64_t seed, Fault fault) {
  return combine_cases(seed, fault, true, true);
}

// expert_sum_add_norm: expert_sum_add's y, then yn = rms_norm(y); a case's row is [y | yn]. y has
// expert_sum_add's bound B_d. yn on the computed y: rms_norm's own rounding, relative
// gamma_dim / 2 + 6u, plus y's error carried through the norm to first order: with
// rms = sqrt(mean(y^2) + eps), |rms(y + dy) - rms(y)| <= |dy|_2 / sqrt(dim), so
// |d yn_d| <= |w_d| (B_d + |y_d| |B|_2 / (sqrt(dim) rms)) / rms (times 1 + 2^-10 for the second
// order). NMSE limit: expert_sum_add's plus rms_norm's (yn's carried error is, relative, y's).
// Twin: float16 accumulation, its y normalised and rounded to float16. Planted fault: yn
// normalises y as it was before the add (rms_norm, then expert_sum_add).
std::vector<KernelCase> expert_sum_add_norm_cases(uint64_t seed, Fault fault) {
  const int64_t shapes[][3] = {{3, 8, 2048}, {2, 4, 100}, {1, 2, 4500}};  // rows, k, dim
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 53 + s);
    const int64_t rows = shapes[s][0], k = shapes[s][1], dim = shapes[s][2];
    const CombineInputs in = combine_inputs(rng, rows, k, dim, 3.0);
    const auto e = in.e, w = in.w, y = in.y;  // named copies: clang 14 cannot capture bindings
    std::vector<float> nf = rng.normals(dim, 1.0, 0.2);
    auto nw = std::make_shared<std::vector<uint16_t>>(to_bf16_vec(nf));
    const double eps = 1e-6, rel = gamma32(double(dim)) / 2 + 6 * kU32;
    KernelCase c;
    c.label =
        "rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " dim=" + std::to_string(dim);
    c.rows = rows;
    c.row_elems = 2 * dim;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> ref(dim), deg(dim), bound(dim);
      double ss = 0, ss_deg = 0, bb = 0;
      for (int64_t d = 0; d < dim; ++d) {
        double sum = 0, mag = 0, dg = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double p = double((*w)[r * k + j]) * (*e)[(r * k + j) * dim + d];
          sum += p;
          mag += std::fabs(p);
          dg = to_f16(dg + to_f16(p));
        }
        const double y0 = (*y)[r * dim + d];
        ref[d] = y0 + sum;
        deg[d] = y0 + dg;
        bound[d] = (1 + kU32) * gamma32(double(2 * k + 1)) * mag + kU32 * std::fabs(ref[d]);
        ss += ref[d] * ref[d];
        ss_deg += deg[d] * deg[d];
        bb += bound[d] * bound[d];
      }
      const double rms = std::sqrt(ss / double(dim) + eps);
      const double rms_deg = std::sqrt(ss_deg / double(dim) + eps);
      const double drms = std::sqrt(bb) / std::sqrt(double(dim));
      for (int64_t d = 0; d < dim; ++d) {
        c.reference.push_back(ref[d]);
        c.degraded.push_back(deg[d]);
        c.atol.push_back(bound[d]);
      }
      for (int64_t d = 0; d < dim; ++d) {
        const double wd = bf16_to_f32((*nw)[d]), yn = ref[d] / rms * wd;
        c.reference.push_back(yn);
        c.degraded.push_back(to_f16(deg[d] / rms_deg * wd));
        const double carried =
            std::fabs(wd) * (bound[d] + std::fabs(ref[d]) * drms / rms) / rms * (1 + 0x1.0p-10);
        c.atol.push_back(carried + rel * std::fabs(yn));
      }
    }
    c.nmse_limit = 32.0 * double(2 * k + 2) * kU32 * kU32 + rel * rel;
    c.input_norms = {l2(*e), l2(*w), l2(*y), l2(nf)};
    c.run = [e, w, y, nw, k, dim, eps, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      std::vector<float> y_out(y->begin() + r0 * dim, y->begin() + (r0 + n) * dim);
      std::vector<float> yn_out(y_out.size(), std::numeric_limits<float>::quiet_NaN());
      {
        DeviceCopies d(b);
        float* yd = d.output(y_out.data(), y_out.size());
        float* ynd = d.output(yn_out.data(), yn_out.size());
        auto scratch = b.alloc(static_cast<size_t>(n * dim) * sizeof(float));
        const float* ed = d.in(*e) + r0 * k * dim;
        std::vector<float> wt(w->begin() + r0 * k, w->begin() + (r0 + n) * k);
        const float* wd = d.in(wt);
        const uint16_t* nd = d.in(*nw);
        if (fault == Fault::NormBeforeAdd) {
          b.rms_norm(yd, nd, n, dim, static_cast<float>(eps), ynd);
          b.expert_sum_add(ed, wd, n, k, dim, scratch->f32(), yd);
        } else {
          b.expert_sum_add_norm(ed, wd, n, k, dim, scratch->f32(), yd, nd, static_cast<float>(eps),
                                ynd);
        }
        d.finish();
      }
      std::vector<float> host(static_cast<size_t>(n * 2 * dim));
      for (int64_t r = 0; r < n; ++r) {
        std::copy_n(&y_out[r * dim], dim, &host[r * 2 * dim]);
        std::copy_n(&yn_out[r * dim], dim, &host[r * 2 * dim + dim]);
      }
      stage(b, out, host.data(), n * 2 * dim);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// moe_experts: for each (row, rank) pair the expert's SwiGLU MLP, against float64 over the
// dequantized expert weights. Bound, per element, first order in the products' errors (each
// product as linear_*: (gamma_{k+2} + 2^-17) sum|x w|, the 2^-17 for the AVX-512 bfloat16
// activation pair (its worst case, kernels_linear.cpp); SwiGLU 8u relative; |d silu/dg| <= 1.1):
//   dg_i, du_i = (gamma_{H+2} + 2^-17) sum_h |x_h w_ih|,
//   da_i = 1.1 |u_i| dg_i + |silu(g_i)| du_i + 8u |a_i|,
//   |err_o| <= sum_i |wd_oi| da_i + (gamma_{I+2} + 2^-17) sum_i |wd_oi a_i|.
// NMSE limit 32 (H + I) u^2 (the two float32 reductions, as linear's 32 k u^2) + 4 * 2^-36 (two
// stages of the activation pair's error, about 2^-36 / 3 each); float16 activations (the twin)
// give about 1e-7. Slots j >= k of a row (out_slots > k: the shared expert's slot) are the
// caller's: NaN reference, they must stay unwritten. Rows share experts (few stored experts, or
// all rows on one), so gate 4 (each row alone against the batch) shows that a row's outputs do
// not depend on which other rows chose the same expert, across group sizes 1 to 9 (the row tiles
// of the products change inside that range).
std::vector<KernelCase> moe_experts_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, hidden, inter, stored, k, slots;
    bool nvfp4, all_one;
  };
  const Shape shapes[] = {{1, 144, 80, 6, 2, 2, true, false},  {2, 128, 64, 4, 2, 3, true, false},
                          {5, 144, 48, 6, 4, 4, true, false},  {9, 128, 32, 3, 2, 2, true, false},
                          {3, 128, 96, 8, 3, 4, false, false}, {4, 256, 64, 5, 1, 1, true, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    const int64_t H = sh.hidden, I = sh.inter, k = sh.k;
    Rng rng(seed * 131 + s);
    struct Expert {
      Nvfp4Matrix nv[3];
      Bf16Matrix bf[3];
      const std::vector<double>& w(int m, bool nvfp4) const { return nvfp4 ? nv[m].w : bf[m].w; }
    };
    auto experts = std::make_shared<std::vector<Expert>>(sh.stored);
    auto views = std::make_shared<std::vector<ExpertWeights>>();
    for (Expert& e : *experts) {
      const int64_t outs[3] = {I, I, H}, ins[3] = {H, H, I};
      for (int m = 0; m < 3; ++m) {
        if (sh.nvfp4)
          e.nv[m] = random_nvfp4(rng, outs[m], ins[m]);
        else
          e.bf[m] = random_bf16(rng, outs[m], ins[m], 1.0 / std::sqrt(double(ins[m])));
      }
    }
    for (const Expert& e : *experts) {
      if (sh.nvfp4)
        views->push_back({e.nv[0].view(), e.nv[1].view(), e.nv[2].view()});
      else
        views->push_back({e.bf[0].view(), e.bf[1].view(), e.bf[2].view()});
    }
    auto x = std::make_shared<std::vector<float>>(rng.normals(sh.rows * H));
    auto index = std::make_shared<std::vector<int32_t>>(sh.rows * k);
    for (int64_t r = 0; r < sh.rows; ++r) {
      std::vector<int32_t> pick(sh.stored);
      std::iota(pick.begin(), pick.end(), 0);
      std::shuffle(pick.begin(), pick.end(), rng.gen);
      for (int64_t j = 0; j < k; ++j) (*index)[r * k + j] = sh.all_one ? 2 : pick[j];
    }
    KernelCase c;
    c.label = std::string(sh.nvfp4 ? "nvfp4" : "bf16") + " rows=" + std::to_string(sh.rows) +
              " hidden=" + std::to_string(H) + " inter=" + std::to_string(I) +
              " stored=" + std::to_string(sh.stored) + " k=" + std::to_string(k) +
              " slots=" + std::to_string(sh.slots) + (sh.all_one ? " all rows on one expert" : "");
    c.rows = sh.rows;
    c.row_elems = sh.slots * H;
    const double cg = gamma32(double(H + 2)) + std::ldexp(1.0, -17);
    const double cd = gamma32(double(I + 2)) + std::ldexp(1.0, -17);
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t j = 0; j < sh.slots; ++j) {
        if (j >= k) {
          for (int64_t o = 0; o < H; ++o) {
            c.reference.push_back(std::numeric_limits<double>::quiet_NaN());
            c.degraded.push_back(std::numeric_limits<double>::quiet_NaN());
            c.atol.push_back(0.0);
          }
          continue;
        }
        const Expert& e = (*experts)[(*index)[r * k + j]];
        const auto &wg = e.w(0, sh.nvfp4), &wu = e.w(1, sh.nvfp4), &wd = e.w(2, sh.nvfp4);
        std::vector<double> a(I), a16(I), da(I);
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0, g16 = 0, u16 = 0, mg = 0, mu = 0;
          for (int64_t h = 0; h < H; ++h) {
            const double xv = (*x)[r * H + h], x16 = to_f16(xv);
            g += xv * wg[i * H + h];
            u += xv * wu[i * H + h];
            g16 += x16 * wg[i * H + h];
            u16 += x16 * wu[i * H + h];
            mg += std::fabs(xv * wg[i * H + h]);
            mu += std::fabs(xv * wu[i * H + h]);
          }
          const double silu = g / (1.0 + std::exp(-g));
          a[i] = silu * u;
          a16[i] = to_f16(g16 / (1.0 + std::exp(-g16)) * u16);
          da[i] =
              1.1 * std::fabs(u) * cg * mg + std::fabs(silu) * cg * mu + 8 * kU32 * std::fabs(a[i]);
        }
        for (int64_t o = 0; o < H; ++o) {
          double y = 0, y16 = 0, prop = 0, mag = 0;
          for (int64_t i = 0; i < I; ++i) {
            y += wd[o * I + i] * a[i];
            y16 += wd[o * I + i] * a16[i];
            prop += std::fabs(wd[o * I + i]) * da[i];
            mag += std::fabs(wd[o * I + i] * a[i]);
          }
          c.reference.push_back(y);
          c.degraded.push_back(y16);
          c.atol.push_back(prop + cd * mag);
        }
      }
    c.nmse_limit = 32.0 * double(H + I) * kU32 * kU32 + 4 * std::ldexp(1.0, -36);
    c.input_norms = {l2(*x), l2(experts->front().w(0, sh.nvfp4)),
                     l2(experts->front().w(2, sh.nvfp4))};
    // The expert weights made resident on each backend once per case (a GPU copies them): the
    // backend keeps a table of each expert array's pointers, so the array and its weights must
    // stay the same for every call of the case.
    auto resident = std::make_shared<std::map<const Backend*, std::vector<ExpertWeights>>>();
    c.run = [experts, views, resident, x, index, sh, fault](Backend& b, int64_t r0, int64_t n,
                                                            float* out) {
      const int64_t H = sh.hidden, I = sh.inter, k = sh.k;
      std::vector<int32_t> idx(index->begin() + r0 * k, index->begin() + (r0 + n) * k);
      if (fault == Fault::NeighbourExpert)
        for (int64_t r = 0; r < n; ++r) idx[r * k + k - 1] = (idx[r * k + k - 1] + 1) % sh.stored;
      const float* xr = x->data() + r0 * H;
      if (fault != Fault::SharedExpertOrder) {
        std::vector<ExpertWeights>& dev = (*resident)[&b];
        if (dev.empty())
          for (const ExpertWeights& e : *views)
            dev.push_back({b.resident(e.gate), b.resident(e.up), b.resident(e.down)});
        const std::vector<float> ws(
            static_cast<size_t>(Backend::moe_workspace_floats(n, k, H, I, sh.stored)));
        DeviceCopies d(b);
        b.moe_experts(dev.data(), sh.stored, d.in(xr, size_t(n * H)), n, H, d.in(idx), k, sh.slots,
                      out, d.in(ws));
        return true;
      }
      // A faulty kernel whose float32 reductions run backwards when more than one row shares an
      // expert: accurate (gate 2 passes) but a row's bits depend on its neighbours (gate 4).
      std::vector<float> host(static_cast<size_t>(n * sh.slots * H));
      b.download(host.data(), out, host.size() * sizeof(float));
      auto dot = [](const std::vector<double>& w, int64_t row, const float* v, int64_t len,
                    bool backwards) {
        float acc = 0;
        for (int64_t t = 0; t < len; ++t) {
          const int64_t i = backwards ? len - 1 - t : t;
          acc += v[i] * static_cast<float>(w[row * len + i]);
        }
        return acc;
      };
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const int32_t sel = idx[r * k + j];
          const bool shared = std::count(idx.begin(), idx.end(), sel) > 1;
          const Expert& e = (*experts)[sel];
          std::vector<float> a(static_cast<size_t>(I));
          for (int64_t i = 0; i < I; ++i) {
            const float g = dot(e.w(0, sh.nvfp4), i, xr + r * H, H, shared);
            const float u = dot(e.w(1, sh.nvfp4), i, xr + r * H, H, shared);
            a[i] = g / (1.0f + std::exp(-g)) * u;
          }
          for (int64_t o = 0; o < H; ++o)
            host[(r * sh.slots + j) * H + o] = dot(e.w(2, sh.nvfp4), o, a.data(), I, shared);
        }
      stage(b, out, host.data(), n * sh.slots * H);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// moe_experts on the CPU benchmark's shape: 4 rows (lanes), k = 4 of 64 stored NVFP4 experts
// [512, 1024], 16 distinct experts, each read once: the traffic is their weights. linear_nvfp4
// alone runs at about 3.7x the copy-bandwidth floor on an AVX2 machine (its limit is 4x); the
// routed experts add the gathers, SwiGLU and 48 one-row products: 6x the floor plus 1 ms.
Limit moe_experts_limit() {
  Limit l;
  const int64_t rows = 4, k = 4, H = 1024, I = 512, stored = 64;
  l.size = "rows=4 k=4 of 64 nvfp4 experts hidden=1024 inter=512 (16 distinct)";
  const double per_matrix = double(H * I) * (0.5 + 1.0 / 16);
  l.bytes = 16 * 3 * per_matrix + double(rows * k * H) * 4 * 2;
  l.factor = 6.0;
  l.floor_s = 1e-3;
  l.time_call = [=](Backend& b) {
    auto codes = std::make_shared<std::vector<uint8_t>>(size_t(stored * 3 * H * I / 2), 0x5a);
    auto scales =
        std::make_shared<std::vector<uint8_t>>(size_t(stored * 3 * H * I / 16), f32_to_e4m3(1.0f));
    std::vector<ExpertWeights> experts(stored);
    for (int64_t s = 0; s < stored; ++s)
      for (int m = 0; m < 3; ++m) {
        const int64_t at = (s * 3 + m) * H * I;
        const LinearWeight w{WeightFormat::NVFP4,    m == 2 ? H : I,           m == 2 ? I : H,
                             codes->data() + at / 2, scales->data() + at / 16, 0.01f};
        (m == 0 ? experts[s].gate : m == 1 ? experts[s].up : experts[s].down) = b.resident(w);
      }
    Rng rng(19);
    std::vector<float> x = rng.normals(rows * H), out(rows * k * H);
    std::vector<int32_t> index(rows * k);
    for (int64_t p = 0; p < rows * k; ++p) index[p] = static_cast<int32_t>(p * 4 + 1);
    const std::vector<float> ws(
        static_cast<size_t>(Backend::moe_workspace_floats(rows, k, H, I, stored)));
    DeviceCopies d(b);
    const float* xd = d.in(x);
    const int32_t* indexd = d.in(index);
    float *outd = d.in(out), *wsd = d.in(ws);
    return median_seconds(7, [&] {
      b.moe_experts(experts.data(), stored, xd, rows, H, indexd, k, k, outd, wsd);
      b.synchronize();
    });
  };
  return l;
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
      DeviceCopies d(b);
      const float* lgd = d.in(lg);
      const int32_t* cold = d.in(col);
      int32_t* idxd = d.in(idx);
      float* wd = d.in(w);
      return median_seconds(21, [&] {
        b.route_topk(lgd, 2, 128, cold, cold, 128, 8, true, idxd, wd);
        b.synchronize();
      });
    };
  } else if (name == "expert_combine" || name == "expert_sum" || name == "expert_sum_add") {
    l.size = "rows=2 k=8 dim=2048";
    l.bytes = 2.0 * 8 * 2048 * 4 * 2;
    const bool from_zero = name == "expert_sum", add = name == "expert_sum_add";
    l.time_call = [from_zero, add](Backend& b) {
      Rng rng(9);
      std::vector<float> e = rng.normals(2 * 8 * 2048), w = rng.normals(16), y(2 * 2048);
      DeviceCopies d(b);
      const float *ed = d.in(e), *wd = d.in(w);
      float* yd = d.in(y);
      float* scratch = d.in(y);
      return median_seconds(21, [&] {
        if (add)
          b.expert_sum_add(ed, wd, 2, 8, 2048, scratch, yd);
        else if (from_zero)
          b.expert_sum(ed, wd, 2, 8, 2048, yd);
        else
          b.expert_combine(ed, wd, 2, 8, 2048, yd);
        b.synchronize();
      });
    };
  } else if (name == "expert_sum_add_norm") {
    l.size = "rows=2 k=8 dim=2048";
    l.bytes = 2.0 * 8 * 2048 * 4 + 2.0 * 2048 * 4 * 3;
    l.time_call = [](Backend& b) {
      Rng rng(9);
      std::vector<float> e = rng.normals(2 * 8 * 2048), w = rng.normals(16), y(2 * 2048);
      const std::vector<uint16_t> nw = to_bf16_vec(rng.normals(2048, 1.0, 0.2));
      DeviceCopies d(b);
      const float *ed = d.in(e), *wd = d.in(w);
      const uint16_t* nd = d.in(nw);
      float *yd = d.in(y), *scratch = d.in(y), *ynd = d.in(y);
      return median_seconds(21, [&] {
        b.expert_sum_add_norm(ed, wd, 2, 8, 2048, scratch, yd, nd, 1e-6f, ynd);
        b.synchronize();
      });
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
      DeviceCopies d(b);
      const uint16_t* td = d.in(t);
      const int32_t* idsd = d.in(ids);
      float* od = d.in(o);
      return median_seconds(21, [&] {
        b.embed_sum(td, 2048, idsd, 2, 8, od);
        b.synchronize();
      });
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
      DeviceCopies d(b);
      const float *cbd = d.in(cb), *xd = d.in(x);
      float* od = d.in(o);
      int32_t* codesd = d.in(codes);
      return median_seconds(9, [&] {
        if (encode)
          b.vq_encode(cbd, 2048, 256, xd, 8, codesd);
        else
          b.vq_decode(cbd, 256, codesd, 8, od);
        b.synchronize();
      });
    };
  }
  return l;
}

}  // namespace drama::contract

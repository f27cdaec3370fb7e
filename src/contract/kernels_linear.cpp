// Matrix products (NVFP4 W4A16, BF16) and NVFP4 dequantize.
//
// Tolerance (linear): the kernel forms x*w in float32 and sums k products in float32 in some fixed
// order; dequantization (e2m1 * e4m3 exact, times scale_2) adds one rounding. Activations are
// float32, except on the AVX-512 NVFP4 path, which holds each as a pair of bfloat16 hi + lo: 16
// significant bits, relative error at most 2^-18 (hi is x rounded to 8 bits, lo the remainder
// rounded to 8 bits), products of e2m1 and bfloat16 exact. Per element:
// |y - ref| <= (gamma_{k+2} + 2^-18) * sum|x w| (Higham's bound for any summation order plus the
// activation term). NMSE: a random-order float32 sum has expected NMSE about k u^2 / 6, the
// activation pair adds about 2^-36 / 3 = 4.9e-12; the limit is 32 k u^2 (k=144: 1.6e-11, k=2048:
// 2.4e-10), far below float16 activations (about 8e-8) and bfloat16 (about 1e-6), which the twin
// uses.
// Exact mode: odd integer inputs in [2049, 4095] (not representable in float16), unit or double
// block scales, scale_2 = 1: every product is a multiple of 0.5 and every partial sum is below
// 128 * 4095 * 12 < 2^23, so any summation order gives the exact result bit for bit.
#include <algorithm>
#include <cmath>
#include <memory>

#include "contract/kernels.h"
#include "contract/registry_util.h"

namespace drama::contract {

namespace {

struct LinearShape {
  int64_t m, k, rows;
  bool exact;
};
constexpr LinearShape kShapes[] = {{37, 144, 1, false},   {64, 256, 2, false},  {33, 512, 3, false},
                                   {128, 1024, 5, false}, {19, 2048, 9, false}, {24, 128, 4, true}};

struct LinearInputs {
  int64_t m, k;
  std::vector<float> x;
  Nvfp4Matrix nv;       // used when nvfp4
  Bf16Matrix bf;        // used otherwise
  LinearWeight faulty;  // the weight a weight-level fault runs with
  std::vector<uint8_t> faulty_codes, faulty_scales;
  const std::vector<double>& w(bool nvfp4) const { return nvfp4 ? nv.w : bf.w; }
};

// Scalar twins used by faults that replace the kernel.
void scalar_linear(const LinearInputs& in, bool nvfp4, int64_t r0, int64_t n, bool fp16_acc,
                   bool reverse_when_batched, std::vector<float>& out) {
  const auto& w = in.w(nvfp4);
  out.assign(static_cast<size_t>(n * in.m), 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < in.m; ++o) {
      float acc = 0.0f;
      double acc16 = 0;  // a float16 accumulator
      for (int64_t t = 0; t < in.k; ++t) {
        const int64_t i = (reverse_when_batched && n > 1) ? in.k - 1 - t : t;
        const float p = in.x[(r0 + r) * in.k + i] * static_cast<float>(w[o * in.k + i]);
        if (fp16_acc)
          acc16 = to_f16(acc16 + to_f16(p));
        else
          acc += p;
      }
      out[r * in.m + o] = fp16_acc ? static_cast<float>(acc16) : acc;
    }
}

std::vector<KernelCase> linear_cases(uint64_t seed, Fault fault, bool nvfp4) {
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(kShapes); ++s) {
    const LinearShape sh = kShapes[s];
    Rng rng(seed * 31 + s);
    auto in = std::make_shared<LinearInputs>();
    in->m = sh.m;
    in->k = sh.k;
    if (nvfp4)
      in->nv = random_nvfp4(rng, sh.m, sh.k, sh.exact);
    else
      in->bf = random_bf16(rng, sh.m, sh.k, 1.0 / std::sqrt(double(sh.k)), sh.exact);
    in->x.resize(static_cast<size_t>(sh.rows * sh.k));
    for (auto& v : in->x)
      v = sh.exact
              ? static_cast<float>((2049 + 2 * rng.integer(0, 1023)) * (rng.integer(0, 1) ? 1 : -1))
              : static_cast<float>(rng.normal());
    // Weight-level faults run the real kernel on a corrupted copy of the weight.
    if (nvfp4) {
      in->faulty_codes = in->nv.codes;
      in->faulty_scales = in->nv.scales;
      in->faulty = in->nv.view();
      const int64_t bpr = sh.k / 16;
      if (fault == Fault::SwappedNibbles)
        for (auto& b : in->faulty_codes) b = static_cast<uint8_t>((b << 4) | (b >> 4));
      if (fault == Fault::WrongScaleBlock)
        for (int64_t o = 0; o < sh.m; ++o)
          std::rotate(in->faulty_scales.begin() + o * bpr, in->faulty_scales.begin() + o * bpr + 1,
                      in->faulty_scales.begin() + (o + 1) * bpr);
      if (fault == Fault::MissingGlobalScale) in->faulty.scale2 = 1.0f;
      if (fault == Fault::SkippedTailBlock)
        for (int64_t o = 0; o < sh.m; ++o)
          std::fill_n(in->faulty_codes.begin() + o * (sh.k / 2) + (sh.k / 2 - 8), 8, 0);
      in->faulty.data = in->faulty_codes.data();
      in->faulty.scales = in->faulty_scales.data();
    }
    KernelCase c;
    c.label = std::string(nvfp4 ? "nvfp4" : "bf16") + " m=" + std::to_string(sh.m) +
              " k=" + std::to_string(sh.k) + " rows=" + std::to_string(sh.rows) +
              (sh.exact ? " exact" : "");
    c.rows = sh.rows;
    c.row_elems = sh.m;
    c.exact = sh.exact;
    const auto& w = in->w(nvfp4);
    c.reference.resize(static_cast<size_t>(sh.rows * sh.m));
    c.degraded.resize(c.reference.size());
    c.atol.resize(c.reference.size());
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t o = 0; o < sh.m; ++o) {
        double ref = 0, deg = 0, mag = 0;
        for (int64_t i = 0; i < sh.k; ++i) {
          const double xv = in->x[r * sh.k + i], wv = w[o * sh.k + i];
          ref += xv * wv;
          deg += to_f16(xv) * wv;  // float16 activations
          mag += std::fabs(xv * wv);
        }
        c.reference[r * sh.m + o] = ref;
        c.degraded[r * sh.m + o] = deg;
        c.atol[r * sh.m + o] = (gamma32(double(sh.k + 2)) + std::ldexp(1.0, -18)) * mag;
      }
    c.nmse_limit = 32.0 * double(sh.k) * kU32 * kU32;
    c.input_norms = {l2(in->x), l2(w)};
    auto ref = std::make_shared<std::vector<double>>(c.reference);
    c.run = [in, nvfp4, fault, ref](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      const float* x = d.in(in->x.data() + r0 * in->k, static_cast<size_t>(n * in->k));
      std::vector<float> tmp;
      switch (fault) {
        case Fault::SwappedNibbles:
        case Fault::WrongScaleBlock:
        case Fault::MissingGlobalScale:
        case Fault::SkippedTailBlock:
          b.linear(d.weight(in->faulty), x, n, out);
          return true;
        case Fault::Fp16Accumulation:
        case Fault::BatchDependentOrder:
          scalar_linear(*in, nvfp4, r0, n, fault == Fault::Fp16Accumulation,
                        fault == Fault::BatchDependentOrder, tmp);
          stage(b, out, tmp.data(), n * in->m);
          return true;
        case Fault::ExactReferenceCopy:
          tmp.resize(static_cast<size_t>(n * in->m));
          for (size_t i = 0; i < tmp.size(); ++i)
            tmp[i] = static_cast<float>((*ref)[r0 * in->m + i]);
          stage(b, out, tmp.data(), n * in->m);
          return true;
        default:
          b.linear(d.weight(nvfp4 ? in->nv.view() : in->bf.view()), x, n, out);
          return true;
      }
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

Limit linear_limit(bool nvfp4) {
  const int64_t m = 4096, k = 14336;
  Limit l;
  l.size = "m=4096 k=14336 rows=1";
  l.bytes = nvfp4 ? double(m * k / 2 + m * k / 16) : double(m * k * 2);
  l.factor = 4.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(7);
    std::vector<float> x = rng.normals(k), y(m);
    Nvfp4Matrix nv;
    Bf16Matrix bf;
    LinearWeight w;
    if (nvfp4) {
      nv.out = m;
      nv.in = k;
      nv.codes.assign(size_t(m * k / 2), 0x5a);
      nv.scales.assign(size_t(m * k / 16), f32_to_e4m3(1.0f));
      nv.scale2 = 0.01f;
      w = nv.view();
    } else {
      bf.out = m;
      bf.in = k;
      bf.data.assign(size_t(m * k), f32_to_bf16(0.01f));
      w = bf.view();
    }
    const LinearWeight dev = b.resident(w);
    auto xb = b.alloc(x.size() * 4), yb = b.alloc(y.size() * 4);
    b.upload(xb->data(), x.data(), x.size() * 4);
    return median_seconds(7, [&] {
      b.linear(dev, xb->f32(), 1, yb->f32());
      b.synchronize();
    });
  };
  return l;
}

}  // namespace

std::vector<KernelCase> linear_nvfp4_cases(uint64_t seed, Fault fault) {
  return linear_cases(seed, fault, true);
}
std::vector<KernelCase> linear_bf16_cases(uint64_t seed, Fault fault) {
  return linear_cases(seed, fault, false);
}
Limit linear_nvfp4_limit() {
  return linear_limit(true);
}
Limit linear_bf16_limit() {
  return linear_limit(false);
}

// rms_norm_linears: xn = rms_norm(x, g) (relative rho = gamma_dim / 2 + 6u per element, as
// rms_norm), then y_j = W_j xn. The products carry linear's (gamma_{k+2} + 2^-18) sum|w xn| on
// the values they see, and xn's own error adds rho sum|w xn|: per element
// |y - ref| <= ((gamma_{k+2} + 2^-18)(1 + rho) + rho) sum|w xn|. NMSE limit 32 k u^2 + 4 rho^2.
// Output per row: y_0, y_1, ... side by side. Twin: xn rounded to float16 (2^-12 relative, over
// rho for dim <= 4096), to bfloat16 (2^-9) for the wider row, where rho exceeds float16's step.
// Planted fault: the products see x normed without its weight g (the real kernels, unit g).
// One case's row is wider than 64 KB (dim 16640), which the CUDA kernel leaves to the separate
// calls: both paths are checked.
std::vector<KernelCase> rms_norm_linears_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, dim;
    std::vector<int64_t> outs;
    bool nvfp4;
  };
  const Shape shapes[] = {{1, 256, {64, 32, 32}, false}, {5, 512, {128, 16}, false},
                          {9, 2048, {40, 8, 8}, false},  {20, 1024, {24, 8}, false},
                          {6, 1024, {32, 16, 16}, true}, {2, 16640, {8}, false}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape& sh = shapes[s];
    Rng rng(seed * 37 + s);
    auto x = std::make_shared<std::vector<float>>(rng.normals(sh.rows * sh.dim, 0.0, 3.0));
    std::vector<float> gf = rng.normals(sh.dim, 1.0, 0.2);
    auto g = std::make_shared<std::vector<uint16_t>>(to_bf16_vec(gf));
    auto nv = std::make_shared<std::vector<Nvfp4Matrix>>();
    auto bf = std::make_shared<std::vector<Bf16Matrix>>();
    for (int64_t m : sh.outs) {
      if (sh.nvfp4)
        nv->push_back(random_nvfp4(rng, m, sh.dim));
      else
        bf->push_back(random_bf16(rng, m, sh.dim, 1.0 / std::sqrt(double(sh.dim))));
    }
    const double eps = 1e-6;
    const double rho = gamma32(double(sh.dim)) / 2 + 6 * kU32;
    const double lin = gamma32(double(sh.dim + 2)) + std::ldexp(1.0, -18);
    int64_t width = 0;
    for (int64_t m : sh.outs) width += m;
    KernelCase c;
    c.label = std::string(sh.nvfp4 ? "nvfp4" : "bf16") + " rows=" + std::to_string(sh.rows) +
              " dim=" + std::to_string(sh.dim) + " outs=";
    for (size_t j = 0; j < sh.outs.size(); ++j)
      c.label += (j ? "+" : "") + std::to_string(sh.outs[j]);
    c.rows = sh.rows;
    c.row_elems = width;
    std::vector<double> wnorms;
    for (int64_t r = 0; r < sh.rows; ++r) {
      const float* xr = x->data() + r * sh.dim;
      double ss = 0;
      for (int64_t d = 0; d < sh.dim; ++d) ss += double(xr[d]) * xr[d];
      const double inv = 1.0 / std::sqrt(ss / double(sh.dim) + eps);
      std::vector<double> xn(sh.dim);
      for (int64_t d = 0; d < sh.dim; ++d) xn[d] = xr[d] * inv * bf16_to_f32((*g)[d]);
      for (size_t j = 0; j < sh.outs.size(); ++j) {
        const std::vector<double>& w = sh.nvfp4 ? (*nv)[j].w : (*bf)[j].w;
        for (int64_t o = 0; o < sh.outs[j]; ++o) {
          double ref = 0, deg = 0, mag = 0;
          for (int64_t i = 0; i < sh.dim; ++i) {
            const double wv = w[o * sh.dim + i];
            ref += wv * xn[i];
            deg += wv * (sh.dim <= 4096 ? to_f16(xn[i])
                                        : double(bf16_to_f32(f32_to_bf16(float(xn[i])))));
            mag += std::fabs(wv * xn[i]);
          }
          c.reference.push_back(ref);
          c.degraded.push_back(deg);
          c.atol.push_back((lin * (1 + rho) + rho) * mag);
        }
      }
    }
    c.nmse_limit = 32.0 * double(sh.dim) * kU32 * kU32 + 4 * rho * rho;
    c.input_norms = {l2(*x), l2(gf)};
    for (const auto& m : *nv) c.input_norms.push_back(l2(m.w));
    for (const auto& m : *bf) c.input_norms.push_back(l2(m.w));
    c.run = [x, g, nv, bf, sh, width, eps, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      const size_t k = sh.outs.size();
      std::vector<std::vector<float>> ys(k);
      {
        DeviceCopies d(b);
        std::vector<LinearWeight> w;
        std::vector<float*> y;
        for (size_t j = 0; j < k; ++j) {
          w.push_back(d.weight(sh.nvfp4 ? (*nv)[j].view() : (*bf)[j].view()));
          ys[j].assign(static_cast<size_t>(n * sh.outs[j]), 0.0f);
          y.push_back(d.output(ys[j].data(), ys[j].size()));
        }
        std::vector<const LinearWeight*> wp;
        for (const LinearWeight& l : w) wp.push_back(&l);
        const float* xd = d.in(x->data() + r0 * sh.dim, static_cast<size_t>(n * sh.dim));
        const std::vector<float> xn_host(static_cast<size_t>(n * sh.dim));
        float* xn = d.in(xn_host.data(), xn_host.size());  // scratch
        const float e = static_cast<float>(eps);
        if (fault == Fault::NormWeightSkipped) {
          const std::vector<uint16_t> ones(static_cast<size_t>(sh.dim), f32_to_bf16(1.0f));
          b.rms_norm(xd, d.in(ones), n, sh.dim, e, xn);
          for (size_t j = 0; j < k; ++j) b.linear(w[j], xn, n, y[j]);
        } else {
          b.rms_norm_linears(xd, d.in(*g), n, sh.dim, e, xn, wp.data(), y.data(),
                             static_cast<int64_t>(k));
        }
        d.finish();
      }
      std::vector<float> host(static_cast<size_t>(n * width));
      for (int64_t r = 0; r < n; ++r) {
        int64_t at = r * width;
        for (size_t j = 0; j < k; ++j)
          for (int64_t o = 0; o < sh.outs[j]; ++o) host[at++] = ys[j][r * sh.outs[j] + o];
      }
      stage(b, out, host.data(), n * width);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

Limit rms_norm_linears_limit() {
  // A layer's input norm and its q, k, v products at the bench-30b-a3b geometry, one row.
  const int64_t dim = 2048, outs[] = {4096, 512, 512};
  Limit l;
  l.size = "rows=1 dim=2048 outs=4096+512+512 bf16";
  l.bytes = double(dim * (4096 + 512 + 512) * 2);
  l.factor = 4.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(9);
    std::vector<float> x = rng.normals(dim);
    std::vector<uint16_t> g(static_cast<size_t>(dim), f32_to_bf16(1.0f));
    std::vector<Bf16Matrix> m(3);
    std::vector<LinearWeight> w;
    std::vector<std::unique_ptr<DeviceBuffer>> ys;
    for (int j = 0; j < 3; ++j) {
      m[j].out = outs[j];
      m[j].in = dim;
      m[j].data.assign(size_t(outs[j] * dim), f32_to_bf16(0.01f));
      w.push_back(b.resident(m[j].view()));
      ys.push_back(b.alloc(size_t(outs[j]) * 4));
    }
    const LinearWeight* wp[3] = {&w[0], &w[1], &w[2]};
    float* yp[3] = {ys[0]->f32(), ys[1]->f32(), ys[2]->f32()};
    auto xb = b.alloc(x.size() * 4), xn = b.alloc(x.size() * 4), gb = b.alloc(g.size() * 2);
    b.upload(xb->data(), x.data(), x.size() * 4);
    b.upload(gb->data(), g.data(), g.size() * 2);
    const uint16_t* gd = static_cast<const uint16_t*>(gb->data());
    return median_seconds(7, [&] {
      b.rms_norm_linears(xb->f32(), gd, 1, dim, 1e-6f, xn->f32(), wp, yp, 3);
      b.synchronize();
    });
  };
  return l;
}

// Dequantize: e2m1 * e4m3 is exact in float32 and one multiply by scale_2 rounds once, so the
// correctly rounded product is the only right answer: exact mode. Twin: float16 output. Planted
// fault: each block dequantized with its neighbour's scale (the real kernel on rotated scales).
std::vector<KernelCase> dequantize_cases(uint64_t seed, Fault fault) {
  std::vector<KernelCase> cases;
  const int64_t shapes[][2] = {{5, 144}, {9, 64}, {3, 2048}};
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 17 + s);
    auto m = std::make_shared<Nvfp4Matrix>(random_nvfp4(rng, shapes[s][0], shapes[s][1]));
    KernelCase c;
    c.label = "rows=" + std::to_string(shapes[s][0]) + " k=" + std::to_string(shapes[s][1]);
    c.rows = shapes[s][0];
    c.row_elems = shapes[s][1];
    c.exact = true;
    c.reference = m->w;
    c.degraded.resize(c.reference.size());
    for (size_t i = 0; i < c.reference.size(); ++i) c.degraded[i] = to_f16(c.reference[i]);
    c.input_norms = {l2(m->codes), l2(m->scales)};
    auto faulty = std::make_shared<Nvfp4Matrix>(*m);
    if (fault == Fault::NeighbourScaleBlock) {
      const int64_t bpr = faulty->in / 16;
      for (int64_t o = 0; o < faulty->out; ++o)
        std::rotate(faulty->scales.begin() + o * bpr, faulty->scales.begin() + o * bpr + 1,
                    faulty->scales.begin() + (o + 1) * bpr);
    }
    c.run = [faulty](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      b.dequantize(d.weight(faulty->view()), r0, n, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

Limit dequantize_limit() {
  Limit l;
  l.size = "rows=256 k=14336";
  const int64_t rows = 256, k = 14336;
  l.bytes = double(rows * k) * (0.5 + 1.0 / 16 + 4);
  l.factor = 8.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Nvfp4Matrix m;
    m.out = rows;
    m.in = k;
    m.codes.assign(size_t(rows * k / 2), 0x3c);
    m.scales.assign(size_t(rows * k / 16), f32_to_e4m3(1.0f));
    auto out = b.alloc(size_t(rows * k) * 4);
    const LinearWeight w = b.resident(m.view());
    return median_seconds(5, [&] {
      b.dequantize(w, 0, rows, out->f32());
      b.synchronize();
    });
  };
  return l;
}

}  // namespace drama::contract

// Matrix products (NVFP4 W4A16, BF16) and NVFP4 dequantize.
//
// Tolerance (linear): the kernel forms x*w in float32 and sums k products in float32 in some fixed
// order; dequantization (e2m1 * e4m3 exact, times scale_2) adds one rounding. Activations are
// float32, except on the AVX-512 NVFP4 path, which holds each as a pair of bfloat16 hi + lo: 16
// significant bits, relative error at most 2^-17 (hi is x rounded to 8 bits, |x - hi| <= 2^-8
// |x|; lo the remainder rounded to 8 bits, whose own error is at most 2^-9 of that remainder's
// binade: 2^-17 |x| at worst, reached near x = 1; measured 2^-17.0 at most and 2^-18.7 rms over
// 300000 x in [1, 2)), products of e2m1 and bfloat16 exact. The CUDA BF16 tensor-core products
// split x exactly into three bfloat16 terms (no activation term). Per element:
// |y - ref| <= (gamma_{k+2} + 2^-17) * sum|x w| (Higham's bound for any summation order plus the
// activation term). NMSE: a random-order float32 sum has expected NMSE about k u^2 / 6, the
// activation pair adds about (2^-18.7)^2 = 5.6e-12; the limit is 32 k u^2 (k=144: 1.6e-11, k=2048:
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

// Activations of a case: odd integers in [2049, 4095] of either sign in exact mode (see above),
// else standard normals.
std::vector<float> linear_activations(Rng& rng, int64_t count, bool exact) {
  std::vector<float> x(static_cast<size_t>(count));
  for (auto& v : x)
    v = exact ? static_cast<float>((2049 + 2 * rng.integer(0, 1023)) * (rng.integer(0, 1) ? 1 : -1))
              : static_cast<float>(rng.normal());
  return x;
}

// The float64 reference, the float16-activation twin and the per-element bound of one product
// (x [rows, k] times w [m, k]), written into c's columns col0 .. col0 + m of rows `row_elems`
// floats long (c.reference, c.degraded and c.atol already sized).
void add_linear_reference(KernelCase& c, const std::vector<float>& x, const std::vector<double>& w,
                          int64_t rows, int64_t m, int64_t k, int64_t col0) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < m; ++o) {
      double ref = 0, deg = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double xv = x[r * k + i], wv = w[o * k + i];
        ref += xv * wv;
        deg += to_f16(xv) * wv;  // float16 activations
        mag += std::fabs(xv * wv);
      }
      const size_t e = static_cast<size_t>(r * c.row_elems + col0 + o);
      c.reference[e] = ref;
      c.degraded[e] = deg;
      c.atol[e] = (gamma32(double(k + 2)) + std::ldexp(1.0, -17)) * mag;
    }
}

// A case of one product at shape sh (label, rows, exactness) with its reference, twin and bound
// (add_linear_reference); the caller adds its run and limits.
KernelCase linear_product_case(const LinearShape& sh, bool nvfp4, const std::vector<float>& x,
                               const std::vector<double>& w) {
  KernelCase c;
  c.label = std::string(nvfp4 ? "nvfp4" : "bf16") + " m=" + std::to_string(sh.m) +
            " k=" + std::to_string(sh.k) + " rows=" + std::to_string(sh.rows) +
            (sh.exact ? " exact" : "");
  c.rows = sh.rows;
  c.row_elems = sh.m;
  c.exact = sh.exact;
  c.reference.resize(static_cast<size_t>(sh.rows * sh.m));
  c.degraded.resize(c.reference.size());
  c.atol.resize(c.reference.size());
  add_linear_reference(c, x, w, sh.rows, sh.m, sh.k, 0);
  return c;
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
    in->x = linear_activations(rng, sh.rows * sh.k, sh.exact);
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
    const auto& w = in->w(nvfp4);
    KernelCase c = linear_product_case(sh, nvfp4, in->x, w);
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

// linears: several products of one input in one call, each with linear's tolerance (the
// elements are linear's, laid side by side: row r holds product 0's outputs, then product 1's,
// ...). Shapes as attention's q, k, v and a dense MLP's gate, up, in both formats, plus an exact
// case. Planted fault: the second product made with the first product's weight rows (the real
// kernel on a weight list with a wrong entry's data).
namespace {
struct LinearsShape {
  int64_t k, rows;
  std::vector<int64_t> m;
  bool nvfp4, exact;
};
}  // namespace

std::vector<KernelCase> linears_cases(uint64_t seed, Fault fault) {
  const LinearsShape shapes[] = {{144, 3, {37, 19, 24}, false, false},
                                 {2048, 2, {64, 16, 16}, false, false},
                                 {256, 5, {33, 17}, true, false},
                                 {128, 4, {24, 8, 16}, false, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const LinearsShape& sh = shapes[s];
    Rng rng(seed * 43 + s);
    struct Inputs {
      std::vector<float> x;
      std::vector<Nvfp4Matrix> nv;
      std::vector<Bf16Matrix> bf;
      std::vector<int64_t> m;
      int64_t k = 0, total = 0;
      bool nvfp4 = false;
      LinearWeight view(size_t j) const { return nvfp4 ? nv[j].view() : bf[j].view(); }
      const std::vector<double>& w(size_t j) const { return nvfp4 ? nv[j].w : bf[j].w; }
    };
    auto in = std::make_shared<Inputs>();
    in->k = sh.k;
    in->m = sh.m;
    in->nvfp4 = sh.nvfp4;
    for (int64_t m : sh.m) {
      in->total += m;
      if (sh.nvfp4)
        in->nv.push_back(random_nvfp4(rng, m, sh.k, sh.exact));
      else
        in->bf.push_back(random_bf16(rng, m, sh.k, 1.0 / std::sqrt(double(sh.k)), sh.exact));
    }
    in->x = linear_activations(rng, sh.rows * sh.k, sh.exact);
    KernelCase c;
    c.label = std::string(sh.nvfp4 ? "nvfp4" : "bf16") + " k=" + std::to_string(sh.k) + " m=";
    for (size_t j = 0; j < sh.m.size(); ++j) {
      if (j) c.label += '+';
      c.label += std::to_string(sh.m[j]);
    }
    c.label += " rows=" + std::to_string(sh.rows) + (sh.exact ? " exact" : "");
    c.rows = sh.rows;
    c.row_elems = in->total;
    c.exact = sh.exact;
    const size_t n_out = static_cast<size_t>(sh.rows * in->total);
    c.reference.resize(n_out);
    c.degraded.resize(n_out);
    c.atol.resize(n_out);
    for (size_t j = 0, col = 0; j < sh.m.size(); col += sh.m[j], ++j)
      add_linear_reference(c, in->x, in->w(j), sh.rows, sh.m[j], sh.k, static_cast<int64_t>(col));
    c.nmse_limit = 32.0 * double(sh.k) * kU32 * kU32;
    std::vector<double> all_w;
    for (size_t j = 0; j < sh.m.size(); ++j)
      all_w.insert(all_w.end(), in->w(j).begin(), in->w(j).end());
    c.input_norms = {l2(in->x), l2(all_w)};
    c.run = [in, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      const float* x = d.in(in->x.data() + r0 * in->k, static_cast<size_t>(n * in->k));
      const size_t np = in->m.size();
      std::vector<LinearWeight> w(np);
      std::vector<std::unique_ptr<DeviceBuffer>> y(np);
      std::vector<Backend::Product> products(np);
      for (size_t j = 0; j < np; ++j) {
        w[j] = d.weight(in->view(j));
        y[j] = b.alloc(static_cast<size_t>(n * in->m[j]) * sizeof(float));
        products[j] = {&w[j], y[j]->f32()};
      }
      if (fault == Fault::NeighbourProductWeight) {
        // The second product's rows read from the first product's weight (same width).
        w[1].data = w[0].data;
        w[1].scales = w[0].scales;
      }
      b.linears(products.data(), static_cast<int64_t>(np), x, n);
      int64_t col = 0;
      for (size_t j = 0; j < np; ++j) {
        b.copy_2d(out + col, in->total, y[j]->f32(), in->m[j], 1, n, in->m[j]);
        col += in->m[j];
      }
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// The limit of linears: attention's q, k and v of bench-30b-a3b (4096 + 512 + 512 outputs of
// 2048 BF16 inputs, one row), the bytes of the three weights.
Limit linears_limit() {
  const int64_t k = 2048;
  const int64_t outs[] = {4096, 512, 512};
  Limit l;
  l.size = "m=4096+512+512 k=2048 rows=1";
  for (int64_t m : outs) l.bytes += double(m * k * 2);
  l.factor = 4.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(7);
    std::vector<float> x = rng.normals(k);
    std::vector<Bf16Matrix> bf(std::size(outs));
    std::vector<LinearWeight> dev(std::size(outs));
    std::vector<std::unique_ptr<DeviceBuffer>> y(std::size(outs));
    std::vector<Backend::Product> products(std::size(outs));
    for (size_t j = 0; j < std::size(outs); ++j) {
      bf[j].out = outs[j];
      bf[j].in = k;
      bf[j].data.assign(size_t(outs[j] * k), f32_to_bf16(0.01f));
      dev[j] = b.resident(bf[j].view());
      y[j] = b.alloc(size_t(outs[j]) * 4);
      products[j] = {&dev[j], y[j]->f32()};
    }
    auto xb = b.alloc(x.size() * 4);
    b.upload(xb->data(), x.data(), x.size() * 4);
    return median_seconds(7, [&] {
      b.linears(products.data(), static_cast<int64_t>(products.size()), xb->f32(), 1);
      b.synchronize();
    });
  };
  return l;
}

// linear_add: y + linear(w, x), the residual add after a product. The product carries linear's
// bound e = (gamma_{k+2} + 2^-17) sum|x w|, the add one rounding: |err| <= (1 + u) e + u |ref|;
// NMSE limit 32 (k + 1) u^2. The residual is of the product's scale (standard normals), so the
// twin (float16 activations, the same residual) stays far outside. BF16 shapes (on CUDA the add
// folded into the product's store) and one NVFP4 (the two calls). Planted fault: the product
// stored over y, the add left out (the real linear).
std::vector<KernelCase> linear_add_cases(uint64_t seed, Fault fault) {
  const LinearShape shapes[] = {
      {37, 144, 1, false}, {64, 256, 2, false}, {128, 1024, 5, false}, {19, 2048, 9, false}};
  const LinearShape nvfp4_shape = {33, 512, 3, false};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s <= std::size(shapes); ++s) {
    const bool nvfp4 = s == std::size(shapes);
    const LinearShape sh = nvfp4 ? nvfp4_shape : shapes[s];
    Rng rng(seed * 53 + s);
    auto in = std::make_shared<LinearInputs>();
    in->m = sh.m;
    in->k = sh.k;
    if (nvfp4)
      in->nv = random_nvfp4(rng, sh.m, sh.k, false);
    else
      in->bf = random_bf16(rng, sh.m, sh.k, 1.0 / std::sqrt(double(sh.k)), false);
    in->x = linear_activations(rng, sh.rows * sh.k, false);
    auto y0 = std::make_shared<std::vector<float>>(rng.normals(sh.rows * sh.m));
    const auto& w = in->w(nvfp4);
    KernelCase c = linear_product_case(sh, nvfp4, in->x, w);
    for (size_t e = 0; e < c.reference.size(); ++e) {
      c.reference[e] += (*y0)[e];
      c.degraded[e] += (*y0)[e];
      c.atol[e] = (1 + kU32) * c.atol[e] + kU32 * std::fabs(c.reference[e]);
    }
    c.nmse_limit = 32.0 * double(sh.k + 1) * kU32 * kU32;
    c.input_norms = {l2(in->x), l2(w), l2(*y0)};
    c.run = [in, y0, nvfp4, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      const float* x = d.in(in->x.data() + r0 * in->k, static_cast<size_t>(n * in->k));
      const LinearWeight w = d.weight(nvfp4 ? in->nv.view() : in->bf.view());
      if (fault == Fault::ResidualLeftOut) {
        b.linear(w, x, n, out);
        return true;
      }
      stage(b, out, y0->data() + r0 * in->m, n * in->m);
      auto scratch = b.alloc(static_cast<size_t>(n * in->m) * sizeof(float));
      b.linear_add(w, x, n, scratch->f32(), out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// The limit of linear_add: attention's o of bench-30b-a3b (2048 outputs of 4096 BF16 inputs, one
// row) added to the residual: the weight's bytes and the residual's read and write.
Limit linear_add_limit() {
  const int64_t m = 2048, k = 4096;
  Limit l;
  l.size = "m=2048 k=4096 rows=1, + residual";
  l.bytes = double(m * k * 2 + 2 * m * 4);
  l.factor = 4.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(7);
    std::vector<float> x = rng.normals(k), y = rng.normals(m);
    Bf16Matrix bf = random_bf16(rng, m, k, 1.0 / std::sqrt(double(k)), false);
    const LinearWeight dev = b.resident(bf.view());
    auto xb = b.alloc(x.size() * 4), yb = b.alloc(y.size() * 4), scratch = b.alloc(y.size() * 4);
    b.upload(xb->data(), x.data(), x.size() * 4);
    b.upload(yb->data(), y.data(), y.size() * 4);
    return median_seconds(7, [&] {
      b.linear_add(dev, xb->f32(), 1, scratch->f32(), yb->f32());
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

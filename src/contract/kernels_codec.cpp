// Codec kernels (Mimi): convolutions, transposed convolutions, activations, LayerNorm, layer
// scale and the vector quantizer.
#include <algorithm>
#include <memory>

#include "contract/kernels.h"
#include "contract/registry_util.h"

namespace drama::contract {

namespace {
constexpr int64_t kSliceRows = 4, kSliceLen = 257;

struct ConvShape {
  int64_t in, out, kernel, stride, dilation, groups, len;
  bool bias;
};
}  // namespace

// conv1d: each output sums (in/groups) * kernel products plus a bias in float32:
// gamma_{terms+1} (sum |w x| + |b|) per element; NMSE limit 32 terms u^2. Twin: float16
// accumulation. Planted fault: the last tap reads one position late (a float32 loop; past the
// input's end it reads 0).
std::vector<KernelCase> conv1d_cases(uint64_t seed, Fault fault) {
  const ConvShape shapes[] = {{8, 16, 7, 1, 1, 1, 40, true}, {16, 32, 4, 2, 1, 1, 33, true},
                              {8, 8, 3, 1, 9, 1, 50, true},  {8, 8, 4, 2, 1, 8, 20, false},
                              {32, 1, 3, 1, 1, 1, 19, true}, {64, 64, 1, 1, 1, 1, 5, false}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const ConvShape sh = shapes[s];
    Rng rng(seed * 67 + s);
    const int64_t ipg = sh.in / sh.groups, opg = sh.out / sh.groups;
    const int64_t out_len = (sh.len - (sh.kernel - 1) * sh.dilation - 1) / sh.stride + 1;
    auto x = std::make_shared<std::vector<float>>(rng.normals(sh.in * sh.len));
    auto w = std::make_shared<std::vector<float>>(
        rng.normals(sh.out * ipg * sh.kernel, 0.0, 1.0 / std::sqrt(double(ipg * sh.kernel))));
    auto b = std::make_shared<std::vector<float>>(rng.normals(sh.out, 0.0, 0.1));
    KernelCase c;
    c.label = "in=" + std::to_string(sh.in) + " out=" + std::to_string(sh.out) +
              " k=" + std::to_string(sh.kernel) + " stride=" + std::to_string(sh.stride) +
              " dil=" + std::to_string(sh.dilation) + " groups=" + std::to_string(sh.groups) +
              " len=" + std::to_string(sh.len);
    c.rows = 1;
    c.row_elems = sh.out * out_len;
    const double terms = double(ipg * sh.kernel);
    for (int64_t o = 0; o < sh.out; ++o)
      for (int64_t t = 0; t < out_len; ++t) {
        const int64_t g = o / opg;
        double ref = sh.bias ? (*b)[o] : 0.0, mag = std::fabs(ref);
        double deg = to_f16(ref);  // a float16 accumulator
        for (int64_t ci = 0; ci < ipg; ++ci)
          for (int64_t j = 0; j < sh.kernel; ++j) {
            const double p = double((*w)[(o * ipg + ci) * sh.kernel + j]) *
                             (*x)[(g * ipg + ci) * sh.len + t * sh.stride + j * sh.dilation];
            ref += p;
            mag += std::fabs(p);
            deg = to_f16(deg + to_f16(p));
          }
        c.reference.push_back(ref);
        c.degraded.push_back(double(deg));
        c.atol.push_back(gamma32(terms + 1) * mag);
      }
    c.nmse_limit = 32 * (terms + 1) * kU32 * kU32;
    c.input_norms = {l2(*x), l2(*w)};
    c.run = [x, w, b, sh, out_len, fault](Backend& be, int64_t, int64_t, float* out) {
      if (fault == Fault::ShiftedTap) {
        const int64_t ipg = sh.in / sh.groups, opg = sh.out / sh.groups;
        std::vector<float> y(static_cast<size_t>(sh.out * out_len));
        for (int64_t o = 0; o < sh.out; ++o)
          for (int64_t t = 0; t < out_len; ++t) {
            float acc = sh.bias ? (*b)[o] : 0.0f;
            for (int64_t ci = 0; ci < ipg; ++ci)
              for (int64_t j = 0; j < sh.kernel; ++j) {
                const int64_t at = t * sh.stride + j * sh.dilation + (j == sh.kernel - 1 ? 1 : 0);
                const float xv = at < sh.len ? (*x)[((o / opg) * ipg + ci) * sh.len + at] : 0.0f;
                acc += (*w)[(o * ipg + ci) * sh.kernel + j] * xv;
              }
            y[o * out_len + t] = acc;
          }
        stage(be, out, y.data(), sh.out * out_len);
        return true;
      }
      DeviceCopies d(be);
      be.conv1d(d.in(*x), sh.in, sh.len, d.in(*w), sh.bias ? d.in(*b) : nullptr, sh.out, sh.kernel,
                sh.stride, sh.dilation, sh.groups, out, out_len);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// conv_transpose1d: each output gathers at most (in/groups) * ceil(kernel/stride) products plus a
// bias: gamma_{terms+1} (sum |w x| + |b|); NMSE limit 32 terms u^2. Twin: float16 accumulation.
// Planted fault: the last tap never added (the real kernel with that tap's weights zeroed).
std::vector<KernelCase> conv_transpose1d_cases(uint64_t seed, Fault fault) {
  const ConvShape shapes[] = {{16, 8, 16, 8, 1, 1, 5, true},
                              {8, 8, 4, 2, 1, 8, 9, false},
                              {4, 6, 3, 1, 1, 1, 7, true},
                              {12, 6, 6, 3, 1, 3, 4, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const ConvShape sh = shapes[s];
    Rng rng(seed * 71 + s);
    const int64_t ipg = sh.in / sh.groups, opg = sh.out / sh.groups;
    const int64_t out_len = (sh.len - 1) * sh.stride + sh.kernel;
    auto x = std::make_shared<std::vector<float>>(rng.normals(sh.in * sh.len));
    auto w = std::make_shared<std::vector<float>>(rng.normals(sh.in * opg * sh.kernel, 0.0, 0.3));
    auto b = std::make_shared<std::vector<float>>(rng.normals(sh.out, 0.0, 0.1));
    KernelCase c;
    c.label = "in=" + std::to_string(sh.in) + " out=" + std::to_string(sh.out) +
              " k=" + std::to_string(sh.kernel) + " stride=" + std::to_string(sh.stride) +
              " groups=" + std::to_string(sh.groups) + " len=" + std::to_string(sh.len);
    c.rows = 1;
    c.row_elems = sh.out * out_len;
    std::vector<double> ref(c.row_elems), mag(c.row_elems);
    std::vector<double> deg(c.row_elems);  // float16 values
    for (int64_t o = 0; o < sh.out; ++o)
      for (int64_t t = 0; t < out_len; ++t) {
        const double bias = sh.bias ? (*b)[o] : 0.0;
        ref[o * out_len + t] = bias;
        mag[o * out_len + t] = std::fabs(bias);
        deg[o * out_len + t] = to_f16(bias);
      }
    for (int64_t ci = 0; ci < sh.in; ++ci) {
      const int64_t g = ci / ipg;
      for (int64_t ol = 0; ol < opg; ++ol)
        for (int64_t t = 0; t < sh.len; ++t)
          for (int64_t j = 0; j < sh.kernel; ++j) {
            const int64_t o = g * opg + ol, at = o * out_len + t * sh.stride + j;
            const double p = double((*x)[ci * sh.len + t]) * (*w)[(ci * opg + ol) * sh.kernel + j];
            ref[at] += p;
            mag[at] += std::fabs(p);
            deg[at] = to_f16(deg[at] + to_f16(p));
          }
    }
    const double terms = double(ipg * ((sh.kernel + sh.stride - 1) / sh.stride));
    c.reference = ref;
    for (int64_t i = 0; i < c.row_elems; ++i) {
      c.degraded.push_back(double(deg[i]));
      c.atol.push_back(gamma32(terms + 1) * mag[i]);
    }
    c.nmse_limit = 32 * (terms + 1) * kU32 * kU32;
    c.input_norms = {l2(*x), l2(*w)};
    auto wk = std::make_shared<std::vector<float>>(*w);
    if (fault == Fault::DroppedLastTap)
      for (size_t i = sh.kernel - 1; i < wk->size(); i += sh.kernel) (*wk)[i] = 0.0f;
    c.run = [x, wk, b, sh](Backend& be, int64_t, int64_t, float* out) {
      DeviceCopies d(be);
      be.conv_transpose1d(d.in(*x), sh.in, sh.len, d.in(*wk), sh.bias ? d.in(*b) : nullptr, sh.out,
                          sh.kernel, sh.stride, sh.groups, out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

namespace {
// One elementwise case over kSliceRows slices (or one long row) with a reference and twin per
// element and a bound atol(x) + rtol |y|.
KernelCase elementwise_case(
    const std::string& label, std::shared_ptr<std::vector<float>> x, int64_t rows,
    const std::function<double(double)>& f, const std::function<double(double)>& f16,
    const std::function<double(double)>& atol, double rtol,
    const std::function<void(Backend&, const float*, int64_t, float*)>& call) {
  KernelCase c;
  c.label = label;
  c.rows = rows;
  c.row_elems = static_cast<int64_t>(x->size()) / rows;
  c.rtol = rtol;
  for (float v : *x) {
    c.reference.push_back(f(v));
    c.degraded.push_back(f16(v));
    c.atol.push_back(atol(v));
  }
  c.nmse_limit = 16 * rtol * rtol;
  c.input_norms = {l2(*x)};
  const int64_t re = c.row_elems;
  c.run = [x, call, re](Backend& b, int64_t r0, int64_t n, float* out) {
    DeviceCopies d(b);
    call(b, d.in(*x) + r0 * re, n * re, out);
    return true;
  };
  return c;
}
}  // namespace

// elu: x for x > 0, else alpha (exp(x) - 1); exp(x) - 1 loses up to u exp(x) <= u absolutely near
// zero, so |err| <= 4u alpha (x <= 0) + 2u |y|. Twin: float16 arithmetic. Planted fault: the
// kernel itself in float16 arithmetic.
std::vector<KernelCase> elu_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 73);
  auto x = std::make_shared<std::vector<float>>(rng.normals(kSliceRows * kSliceLen, 0.0, 1.5));
  const double alpha = 1.0;
  auto f = [alpha](double v) { return v > 0 ? v : alpha * std::expm1(v); };
  auto f16 = [alpha](double v) {
    const double h = to_f16(v);
    return h > 0 ? h : to_f16(alpha * to_f16(to_f16(std::exp(h)) - 1.0));
  };
  return {elementwise_case(
      "n=1028 as 4 slices", x, kSliceRows, f, f16,
      [alpha](double v) { return v > 0 ? 0.0 : 4 * kU32 * alpha; }, 2 * kU32,
      [alpha, f16, fault](Backend& b, const float* in, int64_t n, float* out) {
        if (fault == Fault::Fp16Intermediates) {
          std::vector<float> y(static_cast<size_t>(n));
          b.download(y.data(), in, y.size() * sizeof(float));  // `in` is the backend's copy
          for (float& v : y) v = static_cast<float>(f16(v));
          stage(b, out, y.data(), n);
          return;
        }
        b.elu(in, n, static_cast<float>(alpha), out);
      })};
}

// gelu (exact, erf): 0.5 x (1 + erf(x / sqrt 2)); 1 + erf cancels for negative x, so the bound is
// absolute in |x|: |err| <= 4u |x| + 4u |y|. Twin: float16 arithmetic. The fault variant "one
// wrong element in a million" perturbs one element of a 2^20 + 1 long call by 1e-4 relative: NMSE
// stays below its limit, the per-element bound catches it.
std::vector<KernelCase> gelu_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 79);
  const bool million = fault == Fault::OneWrongElement;
  const int64_t n = million ? (1 << 20) + 1 : kSliceRows * kSliceLen;
  auto x = std::make_shared<std::vector<float>>(rng.normals(n, 0.0, 1.5));
  auto f = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
  auto f16 = [](double v) {
    const double h = to_f16(v);
    return to_f16(to_f16(0.5 * h) * to_f16(1.0 + to_f16(std::erf(to_f16(h / std::sqrt(2.0))))));
  };
  const int64_t victim = n / 2;
  return {elementwise_case(
      million ? "n=1048577" : "n=1028 as 4 slices", x, million ? 1 : kSliceRows, f, f16,
      [](double v) { return 4 * kU32 * std::fabs(v); }, 4 * kU32,
      [million, victim](Backend& b, const float* in, int64_t cnt, float* out) {
        b.gelu(in, cnt, out);
        if (million) {
          float v;
          b.download(&v, out + victim, sizeof v);
          v *= 1.0001f;
          b.upload(out + victim, &v, sizeof v);
        }
      })};
}

// layer_norm: mean and variance over dim (two sums of dim terms), sqrt, divide, scale and shift:
// |err| <= (gamma_{2 dim} + 8u) |w| (|xhat| + 1) + 2u |b|; NMSE limit (gamma_{2 dim} + 8u)^2.
// Twin: output rounded to float16. Planted fault: the variance divided by dim - 1 (the unbiased
// estimator; a relative error of about 1 / (2 dim)).
std::vector<KernelCase> layer_norm_cases(uint64_t seed, Fault fault) {
  const int64_t shapes[][2] = {{5, 64}, {3, 512}, {2, 100}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 83 + s);
    const int64_t rows = shapes[s][0], dim = shapes[s][1];
    auto x = std::make_shared<std::vector<float>>(rng.normals(rows * dim, 0.5, 2.0));
    auto w = std::make_shared<std::vector<float>>(rng.normals(dim, 1.0, 0.2));
    auto b = std::make_shared<std::vector<float>>(rng.normals(dim, 0.0, 0.2));
    const double eps = 1e-5, t = gamma32(2.0 * dim) + 8 * kU32;
    KernelCase c;
    c.label = "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim);
    c.rows = rows;
    c.row_elems = dim;
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t d = 0; d < dim; ++d) mean += (*x)[r * dim + d];
      mean /= double(dim);
      for (int64_t d = 0; d < dim; ++d)
        var += ((*x)[r * dim + d] - mean) * ((*x)[r * dim + d] - mean);
      var /= double(dim);
      for (int64_t d = 0; d < dim; ++d) {
        const double xhat = ((*x)[r * dim + d] - mean) / std::sqrt(var + eps);
        const double y = xhat * (*w)[d] + (*b)[d];
        c.reference.push_back(y);
        c.degraded.push_back(to_f16(y));
        c.atol.push_back(t * std::fabs((*w)[d]) * (std::fabs(xhat) + 1) +
                         2 * kU32 * std::fabs((*b)[d]));
      }
    }
    c.nmse_limit = t * t;
    c.input_norms = {l2(*x), l2(*w), l2(*b)};
    c.run = [x, w, b, dim, eps, fault](Backend& be, int64_t r0, int64_t n, float* out) {
      if (fault == Fault::UnbiasedVariance) {
        std::vector<float> y(static_cast<size_t>(n * dim));
        for (int64_t r = 0; r < n; ++r) {
          const float* xr = x->data() + (r0 + r) * dim;
          double mean = 0, var = 0;
          for (int64_t d = 0; d < dim; ++d) mean += xr[d];
          mean /= double(dim);
          for (int64_t d = 0; d < dim; ++d) var += (xr[d] - mean) * (xr[d] - mean);
          var /= double(dim - 1);
          for (int64_t d = 0; d < dim; ++d)
            y[r * dim + d] =
                static_cast<float>((xr[d] - mean) / std::sqrt(var + eps) * (*w)[d] + (*b)[d]);
        }
        stage(be, out, y.data(), n * dim);
        return true;
      }
      DeviceCopies d(be);
      be.layer_norm(d.in(*x) + r0 * dim, d.in(*w), d.in(*b), n, dim, static_cast<float>(eps), out);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// scale_rows: one multiply, correctly rounded: exact mode. Twin: bfloat16 result. Planted fault:
// the scale rounded to bfloat16 first (as if stored in the weights' format).
std::vector<KernelCase> scale_rows_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 89);
  const int64_t rows = 5, dim = 130;
  auto x = std::make_shared<std::vector<float>>(rng.normals(rows * dim));
  auto sc = std::make_shared<std::vector<float>>(rng.normals(dim, 0.01, 0.003));
  KernelCase c;
  c.label = "rows=5 dim=130";
  c.rows = rows;
  c.row_elems = dim;
  c.exact = true;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dim; ++d) {
      c.reference.push_back(double((*x)[r * dim + d]) * (*sc)[d]);
      c.degraded.push_back(to_bf16(c.reference.back()));
    }
  c.input_norms = {l2(*x), l2(*sc)};
  auto used = std::make_shared<std::vector<float>>(*sc);
  if (fault == Fault::Bf16Scale)
    for (auto& v : *used) v = static_cast<float>(to_bf16(v));
  c.run = [=](Backend& b, int64_t r0, int64_t n, float* out) {
    DeviceCopies d(b);
    b.scale_rows(d.in(*x) + r0 * dim, d.in(*used), n, dim, out);
    return true;
  };
  return {c};
}

// vq_decode: a row copy: exact. Twin: bfloat16 codebook. Planted fault: the row after the code.
std::vector<KernelCase> vq_decode_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 97);
  const int64_t size = 64, dim = 24, n = 9;
  auto cb = std::make_shared<std::vector<float>>(rng.normals(size * dim));
  auto codes = std::make_shared<std::vector<int32_t>>(n);
  for (auto& c : *codes) c = static_cast<int32_t>(rng.integer(0, size - 1));
  KernelCase c;
  c.label = "codebook=64x24 n=9";
  c.rows = n;
  c.row_elems = dim;
  c.exact = true;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < dim; ++d) {
      c.reference.push_back((*cb)[(*codes)[t] * dim + d]);
      c.degraded.push_back(to_bf16(c.reference.back()));
    }
  c.input_norms = {l2(*cb)};
  auto used = std::make_shared<std::vector<int32_t>>(*codes);
  if (fault == Fault::NextCodebookRow)
    for (auto& v : *used) v = static_cast<int32_t>((v + 1) % size);
  c.run = [=](Backend& b, int64_t r0, int64_t cnt, float* out) {
    DeviceCopies d(b);
    b.vq_decode(d.in(*cb), dim, d.in(*used) + r0, cnt, out);
    return true;
  };
  return {c};
}

// vq_encode: nearest codebook row, exact ids. Each query sits 5e-4 (in squared distance) nearer to
// a higher-index row b than to a lower one a: float32 resolves it, float16 distances (the twin)
// cannot and fall back to the lower index. Planted fault: the largest dot product x.c instead of
// the least squared distance (forgets |c|^2).
std::vector<KernelCase> vq_encode_cases(uint64_t seed, Fault fault) {
  Rng rng(seed * 101);
  const int64_t size = 64, dim = 16, n = 7;
  auto cb = std::make_shared<std::vector<float>>(rng.normals(size * dim));
  auto x = std::make_shared<std::vector<float>>(n * dim);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t a = rng.integer(0, size - 2), b = rng.integer(a + 1, size - 1);
    double dist2 = 0;
    for (int64_t d = 0; d < dim; ++d) {
      const double diff = (*cb)[b * dim + d] - (*cb)[a * dim + d];
      dist2 += diff * diff;
    }
    const double shift = 2.5e-4 / dist2;  // d_a - d_b = 4 shift dist2 = 1e-3
    for (int64_t d = 0; d < dim; ++d) {
      const double ca = (*cb)[a * dim + d], cbv = (*cb)[b * dim + d];
      (*x)[t * dim + d] = static_cast<float>(0.5 * (ca + cbv) + shift * (cbv - ca));
    }
  }
  KernelCase c;
  c.label = "codebook=64x16 n=7";
  c.rows = n;
  c.row_elems = 1;
  c.exact = true;
  for (int64_t t = 0; t < n; ++t)
    for (int pass = 0; pass < 2; ++pass) {
      int64_t best = 0;
      double bd = INFINITY;
      for (int64_t k = 0; k < size; ++k) {
        double d2 = 0;
        double h = 0;  // a float16 accumulator
        for (int64_t d = 0; d < dim; ++d) {
          const double diff = double((*x)[t * dim + d]) - (*cb)[k * dim + d];
          d2 += diff * diff;
          h = to_f16(h + to_f16(diff * diff));
        }
        const double v = pass ? double(h) : d2;
        if (v < bd) {
          bd = v;
          best = k;
        }
      }
      (pass ? c.degraded : c.reference).push_back(double(best));
    }
  c.input_norms = {l2(*cb), l2(*x)};
  c.run = [=](Backend& b, int64_t r0, int64_t cnt, float* out) {
    std::vector<int32_t> ids(static_cast<size_t>(cnt), INT32_MIN);
    if (fault == Fault::DotProductNearest) {
      for (int64_t t = 0; t < cnt; ++t) {
        double best = -INFINITY;
        for (int64_t k = 0; k < size; ++k) {
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d)
            dot += double((*x)[(r0 + t) * dim + d]) * (*cb)[k * dim + d];
          if (dot > best) {
            best = dot;
            ids[t] = static_cast<int32_t>(k);
          }
        }
      }
    } else {
      DeviceCopies d(b);
      b.vq_encode(d.in(*cb), size, dim, d.in(*x) + r0 * dim, cnt, d.output(ids.data(), ids.size()));
      d.finish();
    }
    std::vector<float> f(ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      f[i] = ids[i] == INT32_MIN ? std::numeric_limits<float>::quiet_NaN() : float(ids[i]);
    stage(b, out, f.data(), cnt);
    return true;
  };
  return {c};
}

Limit conv1d_limit() {
  Limit l;
  l.size = "in=512 out=512 k=3 len=242";
  const int64_t in = 512, out = 512, k = 3, len = 242;
  l.flops = 2.0 * out * in * k * (len - 2);
  l.bytes = double(in * len + out * in * k + out * (len - 2)) * 4;
  l.factor = 8.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(11);
    std::vector<float> x = rng.normals(in * len), w = rng.normals(out * in * k), y(out * (len - 2));
    DeviceCopies d(b);
    const float *xd = d.in(x), *wd = d.in(w);
    float* yd = d.in(y);
    return median_seconds(3, [&] {
      b.conv1d(xd, in, len, wd, nullptr, out, k, 1, 1, 1, yd, len - 2);
      b.synchronize();
    });
  };
  return l;
}

Limit conv_transpose1d_limit() {
  Limit l;
  l.size = "in=512 out=256 k=16 stride=8 len=30";
  const int64_t in = 512, out = 256, k = 16, s = 8, len = 30;
  l.flops = 2.0 * in * out * k * len;
  l.bytes = double(in * len + in * out * k + out * ((len - 1) * s + k)) * 4;
  l.factor = 8.0;
  l.floor_s = 2e-4;
  l.time_call = [=](Backend& b) {
    Rng rng(13);
    std::vector<float> x = rng.normals(in * len), w = rng.normals(in * out * k),
                       y(out * ((len - 1) * s + k));
    DeviceCopies d(b);
    const float *xd = d.in(x), *wd = d.in(w);
    float* yd = d.in(y);
    return median_seconds(3, [&] {
      b.conv_transpose1d(xd, in, len, wd, nullptr, out, k, s, 1, yd);
      b.synchronize();
    });
  };
  return l;
}

}  // namespace drama::contract

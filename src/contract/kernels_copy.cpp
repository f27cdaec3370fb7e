// Device copies: copy_2d (block copy, transpose, column broadcast), fill, copy_rows and
// gather_ids. All are exact (a copy rounds nothing): exact mode, bit for bit, including values
// that are int32 words viewed as floats (the model moves sampled ids through copy_rows, and small
// integers are float32 subnormals, which a flush-to-zero path would destroy) and -0.0. Elements a
// kernel must not write (the gaps between strided rows) have a NaN reference: they must come back
// as the harness's NaN fill. Twins: the copied values rounded to bfloat16 (ids: float16).
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

#include "contract/kernels.h"
#include "contract/registry_util.h"

namespace drama::contract {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Random normals with a few int32 words (subnormal as floats) and signed zeros mixed in.
std::vector<float> copy_values(Rng& rng, int64_t n) {
  std::vector<float> v = rng.normals(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 7) {
    const int32_t word = static_cast<int32_t>(rng.integer(1, 40000));
    std::memcpy(&v[i], &word, sizeof word);
  }
  for (int64_t i = 3; i < n; i += 29) v[i] = -0.0f;
  return v;
}

}  // namespace

// copy_2d: dst[r * dst_stride + c] = src[r * src_stride + c * src_col_stride].
std::vector<KernelCase> copy_2d_cases(uint64_t seed, Fault fault) {
  struct Shape {
    const char* what;
    int64_t rows, cols, src_stride, src_col_stride, dst_stride;
  };
  // Transposes read columns of a row-major source (src_stride 1, src_col_stride = its row length).
  const Shape shapes[] = {{"block", 5, 37, 40, 1, 41},     {"transpose", 9, 13, 1, 11, 15},
                          {"broadcast", 3, 67, 2, 0, 70},  {"row", 1, 1000, 1000, 1, 1000},
                          {"transpose", 2, 33, 1, 33, 33}, {"column", 7, 1, 3, 1, 2}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 103 + s);
    // Long enough for a column stride of at least 1 (the planted fault reads with stride 1).
    const int64_t src_len =
        (sh.rows - 1) * sh.src_stride + (sh.cols - 1) * std::max<int64_t>(sh.src_col_stride, 1) + 1;
    auto src = std::make_shared<std::vector<float>>(copy_values(rng, src_len));
    KernelCase c;
    c.label = std::string(sh.what) + " rows=" + std::to_string(sh.rows) +
              " cols=" + std::to_string(sh.cols) + " src_stride=" + std::to_string(sh.src_stride) +
              " col_stride=" + std::to_string(sh.src_col_stride) +
              " dst_stride=" + std::to_string(sh.dst_stride);
    c.rows = sh.rows;
    c.row_elems = sh.dst_stride;
    c.exact = true;
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t d = 0; d < sh.dst_stride; ++d) {
        const double v = d < sh.cols ? (*src)[r * sh.src_stride + d * sh.src_col_stride] : kNaN;
        c.reference.push_back(v);
        c.degraded.push_back(d < sh.cols ? to_bf16(v) : kNaN);
      }
    c.input_norms = {l2(*src)};
    const int64_t col_stride = fault == Fault::IgnoredColumnStride ? 1 : sh.src_col_stride;
    c.run = [src, sh, col_stride](Backend& b, int64_t r0, int64_t n, float* out) {
      DeviceCopies d(b);
      b.copy_2d(out, sh.dst_stride, d.in(*src) + r0 * sh.src_stride, sh.src_stride, col_stride, n,
                sh.cols);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// fill: dst[r * stride + c] = value; the gaps beyond cols stay untouched. The zero case (the
// step zeroes its int32 flags with fill 0.0f) first stages random values into the whole output:
// the filled block must read +0.0 exactly, the gaps keep their values (an all-zero output would be
// vacuous for gate 1), and its twin rounds those values to bfloat16.
std::vector<KernelCase> fill_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t rows, cols, stride;
    bool zero;
  };
  const Shape shapes[] = {{4, 37, 40, false},   {1, 1000, 1000, false}, {7, 1, 3, false},
                          {3, 257, 257, false}, {2, 18, 19, false},     {5, 1, 9, true},
                          {3, 20, 24, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 107 + s);
    // A value bfloat16 cannot hold (the twin's rounding must show), or zero.
    float value = 0;
    while (!sh.zero && to_bf16(value) == double(value))
      value = static_cast<float>(rng.normal(0.0, 3.0));
    auto background = std::make_shared<std::vector<float>>(
        sh.zero ? rng.normals(sh.rows * sh.stride) : std::vector<float>());
    KernelCase c;
    c.label = "rows=" + std::to_string(sh.rows) + " cols=" + std::to_string(sh.cols) +
              " stride=" + std::to_string(sh.stride) + (sh.zero ? " zero over staged values" : "");
    c.rows = sh.rows;
    c.row_elems = sh.stride;
    c.exact = true;
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t d = 0; d < sh.stride; ++d) {
        const double v = d < sh.cols ? double(value)
                         : sh.zero   ? (*background)[r * sh.stride + d]
                                     : kNaN;
        c.reference.push_back(v);
        c.degraded.push_back(std::isnan(v) ? kNaN : to_bf16(v));
      }
    c.input_norms = {sh.zero ? l2(*background) : std::fabs(double(value))};
    const int64_t cols = fault == Fault::LastColumnLeft ? sh.cols - 1 : sh.cols;
    c.run = [sh, cols, value, background](Backend& b, int64_t r0, int64_t n, float* out) {
      if (sh.zero) stage(b, out, background->data() + r0 * sh.stride, n * sh.stride);
      b.fill(out, sh.stride, n, cols, value);
      return true;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// copy_rows: dst[dst_row[i]] = src[src_row[i]] (null: i). The destination is a scratch table of
// dst_rows rows filled with a NaN payload; the case reads back row dst_row[i] as output row i and
// checks every other row of the scratch kept its payload (a write to a wrong row is caught even
// when it lands on a row the call does not own).
std::vector<KernelCase> copy_rows_cases(uint64_t seed, Fault fault) {
  struct Shape {
    int64_t n, dim, src_rows, dst_rows;
    bool src_index, dst_index;
  };
  const Shape shapes[] = {{5, 37, 8, 9, true, true},   {3, 64, 3, 6, false, true},
                          {4, 100, 7, 4, true, false}, {1, 2049, 1, 1, false, false},
                          {9, 16, 12, 10, true, true}, {2, 11, 5, 2, true, true}};
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    const Shape sh = shapes[s];
    Rng rng(seed * 109 + s);
    auto src = std::make_shared<std::vector<float>>(copy_values(rng, sh.src_rows * sh.dim));
    auto src_row = std::make_shared<std::vector<int32_t>>(sh.n);
    auto dst_row = std::make_shared<std::vector<int32_t>>(sh.n);
    std::vector<int32_t> perm(sh.dst_rows);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    for (int64_t i = 0; i < sh.n; ++i) {
      (*src_row)[i] = sh.src_index ? static_cast<int32_t>(rng.integer(0, sh.src_rows - 1))
                                   : static_cast<int32_t>(i);
      (*dst_row)[i] = sh.dst_index ? perm[i] : static_cast<int32_t>(i);
    }
    KernelCase c;
    c.label = "n=" + std::to_string(sh.n) + " dim=" + std::to_string(sh.dim) +
              " src=" + std::to_string(sh.src_rows) + (sh.src_index ? " indexed" : " null") +
              " dst=" + std::to_string(sh.dst_rows) + (sh.dst_index ? " indexed" : " null");
    c.rows = sh.n;
    c.row_elems = sh.dim;
    c.exact = true;
    for (int64_t i = 0; i < sh.n; ++i)
      for (int64_t d = 0; d < sh.dim; ++d) {
        const double v = (*src)[(*src_row)[i] * sh.dim + d];
        c.reference.push_back(v);
        c.degraded.push_back(to_bf16(v));
      }
    c.input_norms = {l2(*src)};
    c.run = [src, src_row, dst_row, sh, fault](Backend& b, int64_t r0, int64_t n, float* out) {
      constexpr uint32_t kPayload = 0x7fc0c0deu;
      std::vector<uint32_t> scratch(static_cast<size_t>(sh.dst_rows * sh.dim), kPayload);
      float* dst = reinterpret_cast<float*>(scratch.data());
      std::vector<int32_t> drow(dst_row->begin() + r0, dst_row->begin() + r0 + n);
      if (fault == Fault::WrongDestinationRow) drow.back() = (drow.back() + 1) % sh.dst_rows;
      {
        // The scratch table staged on the backend and read back whole.
        DeviceCopies dc(b);
        float* dst_dev = reinterpret_cast<float*>(dc.output(scratch.data(), scratch.size()));
        const float* src_dev = dc.in(*src);
        // A null index means i itself: the caller offsets the pointer instead.
        const float* s = sh.src_index ? src_dev : src_dev + r0 * sh.dim;
        float* d = sh.dst_index ? dst_dev : dst_dev + r0 * sh.dim;
        const bool shifted = fault == Fault::WrongDestinationRow && !sh.dst_index;
        b.copy_rows(s, sh.src_index ? dc.in(*src_row) + r0 : nullptr, shifted ? dst_dev : d,
                    sh.dst_index || shifted ? dc.in(drow) : nullptr, n, sh.dim);
        dc.finish();
      }
      std::vector<bool> owned(static_cast<size_t>(sh.dst_rows), false);
      for (int64_t i = 0; i < n; ++i) owned[(*dst_row)[r0 + i]] = true;
      bool untouched = true;
      for (int64_t row = 0; row < sh.dst_rows; ++row)
        if (!owned[row])
          for (int64_t e = 0; e < sh.dim; ++e)
            untouched = untouched && scratch[row * sh.dim + e] == kPayload;
      std::vector<float> host(static_cast<size_t>(n * sh.dim));
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(host.data() + i * sh.dim, dst + (*dst_row)[r0 + i] * sh.dim,
                    static_cast<size_t>(sh.dim) * sizeof(float));
      // The payload reads as NaN: an unwritten owned row fails gate 1.
      stage(b, out, host.data(), n * sh.dim);
      return untouched;
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// gather_ids: dst[i] = src[index[i]] + offset[i]: codes (0..2048) of several codebooks turned
// into embedding-table ids (codebook * vocab + code, up to about 33000: odd ids above 2048 are not
// float16 values, so the float16 twin fails).
std::vector<KernelCase> gather_ids_cases(uint64_t seed, Fault fault) {
  const int64_t shapes[][2] = {{1, 1}, {2, 9}, {17, 40}, {40, 136}};  // n, src entries
  std::vector<KernelCase> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    Rng rng(seed * 113 + s);
    const int64_t n = shapes[s][0], m = shapes[s][1], vocab = 2049;
    auto src = std::make_shared<std::vector<int32_t>>(m);
    auto index = std::make_shared<std::vector<int32_t>>(n);
    auto offset = std::make_shared<std::vector<int32_t>>(n);
    for (auto& v : *src) v = static_cast<int32_t>(rng.integer(0, vocab - 1));
    // Entry 0: an odd code plus an even offset, an odd id above 4096 (float16 steps by 4 there).
    (*src)[0] |= 1;
    for (int64_t i = 0; i < n; ++i) {
      (*index)[i] = static_cast<int32_t>(i == 0 ? 0 : rng.integer(0, m - 1));
      (*offset)[i] = static_cast<int32_t>((i == 0 ? 2 : rng.integer(1, 15)) * vocab);
    }
    KernelCase c;
    c.label = "n=" + std::to_string(n) + " src=" + std::to_string(m);
    c.rows = n;
    c.row_elems = 1;
    c.exact = true;
    for (int64_t i = 0; i < n; ++i) {
      const double v = double((*src)[(*index)[i]]) + (*offset)[i];
      c.reference.push_back(v);
      c.degraded.push_back(to_f16(v));
    }
    c.input_norms = {l2(*src), l2(*offset)};
    c.run = [src, index, offset, fault](Backend& b, int64_t r0, int64_t cnt, float* out) {
      IntOut ids(cnt);
      const std::vector<int32_t> zeros(static_cast<size_t>(cnt), 0);
      {
        DeviceCopies d(b);
        int32_t* ids_dev = d.output(ids.buf.data(), ids.buf.size()) + 8;
        b.gather_ids(d.in(*src), d.in(*index) + r0,
                     fault == Fault::DroppedOffset ? d.in(zeros) : d.in(*offset) + r0, cnt,
                     ids_dev);
        d.finish();
      }
      std::vector<float> f(static_cast<size_t>(cnt));
      for (int64_t i = 0; i < cnt; ++i) f[i] = ids.at(i);
      stage(b, out, f.data(), cnt);
      return ids.guards_ok();
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// Copies are bandwidth-bound: 8x the floor of their traffic at the copy bandwidth, plus 0.2 ms.
Limit copy_limit(const char* kernel) {
  Limit l;
  const std::string name = kernel;
  l.factor = 8.0;
  l.floor_s = 2e-4;
  if (name == "copy_2d") {
    // The codec's transpose ([512 channels, 256 steps] to [256, 512]) reads with a stride.
    const int64_t rows = 256, cols = 512;
    l.size = "transpose rows=256 cols=512";
    l.bytes = 2.0 * rows * cols * 4;
    l.time_call = [=](Backend& b) {
      Rng rng(15);
      const std::vector<float> src_h = rng.normals(rows * cols), dst_h(rows * cols);
      DeviceCopies d(b);
      const float* src = d.in(src_h);
      float* dst = d.in(dst_h);
      return median_seconds(9, [&] {
        b.copy_2d(dst, cols, src, 1, rows, rows, cols);
        b.synchronize();
      });
    };
  } else if (name == "fill") {
    const int64_t n = 1 << 20;
    l.size = "rows=1024 cols=1024";
    l.bytes = double(n) * 4;
    l.time_call = [=](Backend& b) {
      DeviceCopies d(b);
      float* dst = d.in(std::vector<float>(n));
      return median_seconds(9, [&] {
        b.fill(dst, 1024, 1024, 1024, 0.5f);
        b.synchronize();
      });
    };
  } else if (name == "copy_rows") {
    const int64_t n = 64, dim = 4096;
    l.size = "n=64 dim=4096 indexed";
    l.bytes = 2.0 * n * dim * 4;
    l.time_call = [=](Backend& b) {
      Rng rng(17);
      const std::vector<float> src_h = rng.normals(n * dim), dst_h(n * dim);
      std::vector<int32_t> rows_h(n);
      for (int64_t i = 0; i < n; ++i) rows_h[i] = static_cast<int32_t>((i * 37) % n);
      DeviceCopies d(b);
      const float* src = d.in(src_h);
      float* dst = d.in(dst_h);
      const int32_t* rows = d.in(rows_h);
      return median_seconds(9, [&] {
        b.copy_rows(src, rows, dst, rows, n, dim);
        b.synchronize();
      });
    };
  } else if (name == "gather_ids") {
    const int64_t n = 4096;
    l.size = "n=4096";
    l.bytes = double(n) * 16;
    l.time_call = [=](Backend& b) {
      std::vector<int32_t> src_h(n, 5), index_h(n), offset_h(n, 2049), dst_h(n);
      for (int64_t i = 0; i < n; ++i) index_h[i] = static_cast<int32_t>((i * 7) % n);
      DeviceCopies d(b);
      const int32_t *src = d.in(src_h), *index = d.in(index_h), *offset = d.in(offset_h);
      int32_t* dst = d.in(dst_h);
      return median_seconds(21, [&] {
        b.gather_ids(src, index, offset, n, dst);
        b.synchronize();
      });
    };
  }
  return l;
}

}  // namespace drama::contract

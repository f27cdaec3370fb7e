// labels: parity cuda
// CUDA backend vs CPU backend on configs/tiny.json checkpoints (BF16 and NVFP4 experts, pruned
// and unpruned, both router layouts): teacher-forced logits within a relative L2 tolerance,
// greedy codes equal, paired == separate guidance bitwise on CUDA, and a row alone == the same
// row inside batches of 2, 3, 8 and 64 bitwise for every batched kernel at the model's shapes.
// Skips, saying why, when there is no usable CUDA device (the build machines have none).
//
// Tolerance: both backends compute in float32 from the same dequantized weights; they differ in
// summation order (warp-strided lanes and butterfly trees, or tensor-core tiles whose products of
// exactly split activations are exact, vs blocked SIMD sums) and in exp/erf/rsqrt rounding
// (CUDA's libdevice vs glibc, a few ulp). This is the situation of
// tests/model/test_parity.cpp (engine vs the PyTorch reference, same derivation: dot products of
// n <= 128 carry ~sqrt(n) 2^-24 ~ 7e-7 relative, about a dozen dependent operations add up to a
// few 1e-6), so the same 1e-5 applies, two orders of magnitude below one BF16 rounding of the
// activations (~2e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "backend/backend.h"
#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "util/dtype.h"

#include "model/model_testing.h"

#ifdef DRAMA_WITH_CUDA
#include "backend/cuda/grouped_experts.h"
#endif

namespace drama {
namespace {

// Runs `undo` when the scope ends: a test that switches a backend's kernels puts them back.
struct AtExit {
  std::function<void()> undo;
  ~AtExit() { undo(); }
};

constexpr double kTolerance = 1e-5;
constexpr const char* kText = "Hello, drama!";

// The CUDA backend, or null with the reason (printed once by the skip).
std::unique_ptr<Backend> try_cuda(std::string& why) {
  try {
    return make_backend({"cuda", 0});
  } catch (const std::exception& e) {
    why = e.what();
    return nullptr;
  }
}

// Fills n floats of device memory with all-one bits (a NaN as a float, -1 as an int32), before a
// call whose workspace it is: a read of workspace the call did not write then shows in the result
// every time, not only when the uninitialised memory happens to hold a NaN.
void poison(Backend& b, float* p, int64_t n) {
  const uint32_t ones = 0xffffffffu;
  float nan;
  std::memcpy(&nan, &ones, sizeof nan);
  b.fill(p, n, 1, n, nan);
}

// Pins the tensor-core products to staged tiles and the narrow layout (a test then switches them
// run by run) and puts the backend's settings back when the scope ends.
struct PinnedLinearLayouts {
  explicit PinnedLinearLayouts(Backend& backend) : b(backend) {
#ifdef DRAMA_WITH_CUDA
    staged = cuda::set_linear_staged(b, true);
    lean = cuda::set_linear_lean(b, true);
    split = cuda::set_linear_split(b, true);
    wide = cuda::set_linear_wide_rows(b, 0);
#endif
  }
  ~PinnedLinearLayouts() {
#ifdef DRAMA_WITH_CUDA
    cuda::set_linear_staged(b, staged);
    cuda::set_linear_lean(b, lean);
    cuda::set_linear_split(b, split);
    cuda::set_linear_wide_rows(b, wide);
#endif
  }
  Backend& b;
  bool staged = true;
  bool lean = true;
  bool split = true;
  int64_t wide = 0;
};

// The layouts of the tensor-core products the bitwise tests run in turn (the same bits in each):
// staged with the lean loop where it fits (linear.cu: lean_fits) and one product's one or two rows
// split once a block (split_fits), the lean loop with every warp splitting its own, staged with
// the general loop, unstaged, and wide at every row count.
constexpr int kLinearLayouts = 5;
constexpr const char* kLinearLayoutNames[kLinearLayouts] = {
    "staged (lean, rows split once a block)", "staged (lean)", "staged (general)", "unstaged",
    "wide"};
void use_linear_layout([[maybe_unused]] Backend& b, [[maybe_unused]] int layout) {
#ifdef DRAMA_WITH_CUDA
  cuda::set_linear_staged(b, layout < 3);
  cuda::set_linear_split(b, layout == 0);
  cuda::set_linear_lean(b, layout < 2);
  cuda::set_linear_wide_rows(b, layout < 4 ? 0 : 1);
#endif
}

#define REQUIRE_CUDA(backend)                               \
  std::string why_no_cuda;                                  \
  std::unique_ptr<Backend> backend = try_cuda(why_no_cuda); \
  if (!backend) GTEST_SKIP() << "no usable CUDA device: " << why_no_cuda

struct Pair {
  Pair(const std::filesystem::path& dir, Backend& cuda)
      : ckpt(dir), cpu(make_backend({"cpu", 2})), on_cpu(ckpt, *cpu), on_cuda(ckpt, cuda) {}
  Checkpoint ckpt;
  std::unique_ptr<Backend> cpu;
  Drama3Model on_cpu, on_cuda;
};

GenerationResult generate(Drama3Model& m, const Voice& voice, float gamma, CfgMode cfg,
                          uint64_t seed, float temperature) {
  const Drama3Config& c = m.config();
  Prompt cond = conditional_prompt(c, kText, voice);
  Prompt uncond = unconditional_prompt(c, kText);
  GenerationOptions o;
  o.seed = seed;
  o.sampling = {temperature, 50, 1.0f};
  o.gamma = gamma;
  o.cfg = cfg;
  o.max_frames = 8;
  return m.generate(cond, &uncond, o, {});
}

class CudaParity : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(CudaParity, LogitsWithinToleranceGreedyEqualPairedEqualsSeparate) {
  REQUIRE_CUDA(cuda);
  const auto [name, flags] = GetParam();
  Pair p(testing::make_checkpoint(name, flags), *cuda);
  const Drama3Config& c = p.ckpt.config();
  const Voice voice = testing::random_voice(c, 5, 23, "The reference transcript.");
  const Voice codes = testing::random_voice(c, 6, 17, "");

  // Teacher-forced logits, both branches' prompts.
  for (const Prompt& prompt :
       {conditional_prompt(c, kText, voice), unconditional_prompt(c, kText)}) {
    const TeacherForcedLogits a = p.on_cuda.teacher_forced(prompt, codes.codes, codes.frames);
    const TeacherForcedLogits b = p.on_cpu.teacher_forced(prompt, codes.codes, codes.frames);
    const double e0 = testing::relative_l2(a.codebook0, b.codebook0);
    const double et = testing::relative_l2(a.tower, b.tower);
    std::printf("%s: codebook0 relative L2 %.3g, tower %.3g (tolerance %.0e)\n", name, e0, et,
                kTolerance);
    EXPECT_LE(e0, kTolerance) << name;
    EXPECT_LE(et, kTolerance) << name;
  }

  // Greedy generation: the same codes on both backends.
  const GenerationResult g_cuda = generate(p.on_cuda, voice, 1.5f, CfgMode::Paired, 1, 0.0f);
  const GenerationResult g_cpu = generate(p.on_cpu, voice, 1.5f, CfgMode::Paired, 1, 0.0f);
  EXPECT_EQ(g_cuda.frames, g_cpu.frames) << name;
  EXPECT_EQ(g_cuda.codes, g_cpu.codes) << name;

  // Paired (one batch of two) == separate (one after the other), sampled, on CUDA.
  for (uint64_t seed : {3u, 4u, 5u}) {
    const GenerationResult paired = generate(p.on_cuda, voice, 1.5f, CfgMode::Paired, seed, 0.9f);
    const GenerationResult separate =
        generate(p.on_cuda, voice, 1.5f, CfgMode::Separate, seed, 0.9f);
    EXPECT_EQ(paired.codes, separate.codes) << name << " seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CudaParity, ::testing::ValuesIn(testing::kParityCheckpoints),
                         testing::checkpoint_case_name);

// Row r of a batched call == the call on row r alone, for batches of 1, 2, 3, 8 and 64 rows, for
// every weight of the tiny NVFP4 checkpoint (attention, router, experts, heads, tower) and for
// RMSNorm, rotary, attention, routing and the expert combine at the model's shapes.
TEST(CudaBatchInvariance, RowAloneEqualsRowInBatchesOf2_3_8_64) {
  REQUIRE_CUDA(cuda);
  Pair p(testing::make_checkpoint("tiny-nvfp4", "--nvfp4"), *cuda);
  const Drama3Config& c = p.ckpt.config();
  Backend& b = *cuda;
  const ModelWeights resident = make_resident(b, p.ckpt.weights(), c);
  std::vector<const LinearWeight*> weights = {&resident.codebook0_head, &resident.tower_input_proj};
  auto add_layer = [&](const LayerWeights& l) {
    for (const LinearWeight* w : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o}) weights.push_back(w);
    if (l.dense) {
      for (const LinearWeight* w : {&l.mlp.gate, &l.mlp.up, &l.mlp.down}) weights.push_back(w);
      return;
    }
    weights.push_back(&l.moe.router);
    for (const auto& e : l.moe.experts)
      for (const LinearWeight* w : {&e.gate, &e.up, &e.down}) weights.push_back(w);
  };
  for (const auto& l : resident.backbone) add_layer(l);
  for (const auto& l : resident.tower) add_layer(l);
  for (const auto& h : resident.tower_heads) weights.push_back(&h);
  const int64_t batches[] = {2, 3, 8, 64};
  const int64_t max_rows = 64;
  auto bits_equal = [](const std::vector<float>& a, const float* b, size_t n) {
    return std::memcmp(a.data(), b, n * sizeof(float)) == 0;
  };
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (const LinearWeight* w : weights) {
    std::vector<float> x(static_cast<size_t>(max_rows * w->in));
    for (auto& v : x) v = normal(gen);
    auto xd = b.alloc(x.size() * 4), yd = b.alloc(static_cast<size_t>(max_rows * w->out) * 4);
    b.upload(xd->data(), x.data(), x.size() * 4);
    std::vector<float> batch(static_cast<size_t>(max_rows * w->out)), alone(w->out);
    for (int64_t rows : batches) {
      b.linear(*w, xd->f32(), rows, yd->f32());
      b.download(batch.data(), yd->data(), static_cast<size_t>(rows * w->out) * 4);
      for (int64_t r = 0; r < rows; ++r) {
        b.linear(*w, xd->f32() + r * w->in, 1, yd->f32());
        b.download(alone.data(), yd->data(), alone.size() * 4);
        ASSERT_TRUE(bits_equal(alone, batch.data() + r * w->out, alone.size()))
            << "linear " << w->out << "x" << w->in << " row " << r << " of " << rows;
        ++checked;
      }
    }
  }
  // RMSNorm, rotary and attention at the backbone's shapes.
  const auto& bb = c.backbone;
  const int64_t H = bb.hidden_size, nh = bb.num_heads, nkv = bb.num_kv_heads, hd = bb.head_dim;
  const int64_t q_elems = nh * hd, kv_elems = nkv * hd;
  std::vector<float> x(static_cast<size_t>(max_rows * std::max(H, q_elems)));
  for (auto& v : x) v = normal(gen);
  std::vector<float> kv(static_cast<size_t>(max_rows * kv_elems));
  for (auto& v : kv) v = normal(gen);
  std::vector<int32_t> pos(max_rows);
  for (int64_t r = 0; r < max_rows; ++r) pos[r] = static_cast<int32_t>(r);
  auto xd = b.alloc(x.size() * 4), kd = b.alloc(kv.size() * 4), vd = b.alloc(kv.size() * 4),
       pd = b.alloc(pos.size() * 4), yd = b.alloc(x.size() * 4);
  b.upload(xd->data(), x.data(), x.size() * 4);
  b.upload(kd->data(), kv.data(), kv.size() * 4);
  b.upload(vd->data(), kv.data(), kv.size() * 4);
  b.upload(pd->data(), pos.data(), pos.size() * 4);
  const auto* pos_dev = static_cast<const int32_t*>(pd->data());
  using Kernel = std::function<void(int64_t r0, int64_t rows)>;
  const std::vector<std::pair<const char*, std::pair<int64_t, Kernel>>> kernels = {
      {"rms_norm",
       {H,
        [&](int64_t r0, int64_t rows) {
          b.rms_norm(xd->f32() + r0 * H, resident.backbone[0].input_norm, rows, H, 1e-6f,
                     yd->f32());
        }}},
      {"rope",
       {q_elems,
        [&](int64_t r0, int64_t rows) {
          b.upload(yd->data(), x.data() + r0 * q_elems, static_cast<size_t>(rows * q_elems) * 4);
          b.rope(yd->f32(), rows, nh, hd, pos_dev + r0, bb.rope_theta);
        }}},
      {"attention",
       {q_elems,
        [&](int64_t r0, int64_t rows) {
          b.attention(xd->f32() + r0 * q_elems, rows, pos_dev + r0, nullptr, kd->f32(), vd->f32(),
                      nh, nkv, hd, 0, yd->f32());
        }}},
  };
  for (const auto& [kname, spec] : kernels) {
    const auto& [elems, run] = spec;
    std::vector<float> batch(static_cast<size_t>(max_rows * elems)), alone(elems);
    for (int64_t rows : batches) {
      run(0, rows);
      b.download(batch.data(), yd->data(), static_cast<size_t>(rows * elems) * 4);
      for (int64_t r = 0; r < rows; ++r) {
        run(r, 1);
        b.download(alone.data(), yd->data(), alone.size() * 4);
        ASSERT_TRUE(bits_equal(alone, batch.data() + r * elems, alone.size()))
            << kname << " row " << r << " of " << rows;
        ++checked;
      }
    }
  }
  std::printf("%d (kernel, row, batch) comparisons bitwise equal\n", checked);
}

// The fused qk_norm_rope_cache (one launch) gives the bits of the six calls it replaces
// (Backend's default: rms_norm twice, rope twice, copy_rows twice, each a CUDA kernel) for q, k
// and both caches, at several head shapes and row counts, the cache rows in shuffled order.
TEST(CudaFusedKernels, QkNormRopeCacheEqualsTheSixCallsBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
  struct Shape {
    int64_t heads, kv_heads, hd;
  };
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int checked = 0;
  for (const Shape sh : {Shape{4, 2, 64}, Shape{32, 4, 128}, Shape{16, 8, 128}, Shape{2, 1, 16}})
    for (const int64_t rows : {1, 2, 3, 8, 64}) {
      const int64_t qd = sh.heads * sh.hd, kvd = sh.kv_heads * sh.hd, cache_rows = rows + 5;
      auto host = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = normal(gen);
        return v;
      };
      const std::vector<float> q = host(rows * qd), k = host(rows * kvd), v = host(rows * kvd),
                               caches = host(cache_rows * kvd);
      std::vector<uint16_t> qw(sh.hd), kw(sh.hd);
      for (auto& w : qw) w = f32_to_bf16(1.0f + 0.1f * normal(gen));
      for (auto& w : kw) w = f32_to_bf16(1.0f + 0.1f * normal(gen));
      std::vector<int32_t> pos(rows), row(cache_rows);
      for (auto& p : pos) p = static_cast<int32_t>(gen() % 8192);
      std::iota(row.begin(), row.end(), 0);
      std::shuffle(row.begin(), row.end(), gen);
      auto dev = [&](const auto& h) {
        auto d = b.alloc(std::max<size_t>(h.size(), 1) * sizeof(h[0]));
        b.upload(d->data(), h.data(), h.size() * sizeof(h[0]));
        return d;
      };
      auto qw_d = dev(qw), kw_d = dev(kw), pos_d = dev(pos), row_d = dev(row), v_d = dev(v);
      std::vector<std::vector<float>> out[2];
      for (int fused = 0; fused < 2; ++fused) {
        auto q_d = dev(q), k_d = dev(k), kc_d = dev(caches), vc_d = dev(caches);
        const auto* w_q = static_cast<const uint16_t*>(qw_d->data());
        const auto* w_k = static_cast<const uint16_t*>(kw_d->data());
        const auto* p = static_cast<const int32_t*>(pos_d->data());
        const auto* r = static_cast<const int32_t*>(row_d->data());
        if (fused)
          b.qk_norm_rope_cache(q_d->f32(), k_d->f32(), v_d->f32(), rows, sh.heads, sh.kv_heads,
                               sh.hd, w_q, w_k, 1e-6f, p, 1e6f, r, kc_d->f32(), vc_d->f32());
        else
          b.Backend::qk_norm_rope_cache(q_d->f32(), k_d->f32(), v_d->f32(), rows, sh.heads,
                                        sh.kv_heads, sh.hd, w_q, w_k, 1e-6f, p, 1e6f, r,
                                        kc_d->f32(), vc_d->f32());
        for (DeviceBuffer* d : {q_d.get(), k_d.get(), kc_d.get(), vc_d.get()}) {
          std::vector<float> h(d->bytes() / 4);
          b.download(h.data(), d->data(), d->bytes());
          out[fused].push_back(std::move(h));
        }
      }
      const char* names[] = {"q", "k", "k cache", "v cache"};
      for (size_t i = 0; i < 4; ++i) {
        ASSERT_EQ(out[0][i].size(), out[1][i].size());
        EXPECT_EQ(std::memcmp(out[0][i].data(), out[1][i].data(), out[0][i].size() * 4), 0)
            << names[i] << " heads " << sh.heads << "/" << sh.kv_heads << " head_dim " << sh.hd
            << " rows " << rows;
        ++checked;
      }
    }
  EXPECT_EQ(checked, 4 * 5 * 4);
}

// linears (the products of one input in one launch) gives each product the bits of linear alone
// (Backend's default: one linear call each), at attention's and a dense MLP's shapes, an input
// width that is not a multiple of 4 (the unvectorised loads), products of very different slicing
// (4096 and 512 outputs: 8 and 16 slices) and every row count the batch test uses.
//
// Each also in every layout of kLinearLayoutNames: staged with the lean loop (lean at in 2048 and
// 4096, whose slices are whole groups of 8 steps, the 2049 outputs' last block holding one weight
// row, 15 past out; not at 144, 64 and 320), its one and two rows of one product split once a
// block (DRAMA_CUDA_LINEAR_SPLIT: the one-call-each runs) and not, with the general loop
// (DRAMA_CUDA_LINEAR_LEAN),
// not staged (DRAMA_CUDA_LINEAR_STAGED, linear.cu), and wide at every row count
// (DRAMA_CUDA_LINEAR_WIDE_ROWS): the same bits (in 2050 is not staged: rows not in whole 16-byte
// chunks; in 144 and 2050 have no wide layout, not whole 64-input chunks; in 320's two slices of
// 10 steps end inside a chunk; at 100 rows q, k and v take the wide layout's 4 row tiles a block,
// at 64 and fewer its 2).
TEST(CudaFusedKernels, LinearsEqualOneLinearCallEachBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
  const PinnedLinearLayouts pinned(b);
  std::mt19937 gen(13);
  std::normal_distribution<float> normal;
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> shapes = {
      {2048, {4096, 512, 512}}, {144, {37, 19, 24}},  {64, {128, 128}},
      {2050, {16, 48, 8, 40}},  {4096, {2048, 2049}}, {320, {40, 136}}};
  int checked = 0;
  for (const auto& [in, outs] : shapes)
    for (const int64_t rows : {1, 2, 3, 8, 64, 100}) {
      std::vector<std::vector<uint16_t>> host(outs.size());
      std::vector<LinearWeight> w(outs.size());
      std::vector<std::unique_ptr<DeviceBuffer>> keep;
      for (size_t j = 0; j < outs.size(); ++j) {
        host[j].resize(static_cast<size_t>(outs[j] * in));
        for (auto& v : host[j]) v = f32_to_bf16(normal(gen) * 0.05f);
        keep.push_back(b.alloc(host[j].size() * 2));
        b.upload(keep.back()->data(), host[j].data(), host[j].size() * 2);
        w[j] = {WeightFormat::BF16, outs[j], in, keep.back()->data(), nullptr, 1.0f};
      }
      std::vector<float> x(static_cast<size_t>(rows * in));
      for (auto& v : x) v = normal(gen);
      auto xd = b.alloc(x.size() * 4);
      b.upload(xd->data(), x.data(), x.size() * 4);
      // Runs: one call each, in one launch, then both again staged with the general loop (not
      // the lean one), with the tiles unstaged, then in the wide layout.
      std::vector<std::vector<float>> got[2 * kLinearLayouts];
      for (int run = 0; run < 2 * kLinearLayouts; ++run) {
        const bool fused = run % 2 == 1;
        use_linear_layout(b, run / 2);
        std::vector<std::unique_ptr<DeviceBuffer>> y;
        std::vector<Backend::Product> products;
        for (size_t j = 0; j < outs.size(); ++j) {
          y.push_back(b.alloc(static_cast<size_t>(rows * outs[j]) * 4));
          poison(b, y.back()->f32(), rows * outs[j]);
          products.push_back({&w[j], y.back()->f32()});
        }
        if (fused)
          b.linears(products.data(), static_cast<int64_t>(products.size()), xd->f32(), rows);
        else
          b.Backend::linears(products.data(), static_cast<int64_t>(products.size()), xd->f32(),
                             rows);
        for (auto& d : y) {
          std::vector<float> h(d->bytes() / 4);
          b.download(h.data(), d->data(), d->bytes());
          got[run].push_back(std::move(h));
        }
      }
      for (size_t j = 0; j < outs.size(); ++j) {
        EXPECT_TRUE(std::all_of(got[1][j].begin(), got[1][j].end(),
                                [](float v) { return std::isfinite(v); }))
            << "product " << j << " has elements linears never wrote, rows " << rows;
        for (int run = 1; run < 2 * kLinearLayouts; ++run)
          EXPECT_EQ(std::memcmp(got[0][j].data(), got[run][j].data(), got[0][j].size() * 4), 0)
              << "product " << j << " (" << outs[j] << "x" << in << ") rows " << rows << " run "
              << run << (run % 2 ? " (one launch), " : " (one call each), ")
              << kLinearLayoutNames[run / 2];
        ++checked;
      }
    }
  EXPECT_EQ(checked, (3 + 3 + 2 + 4 + 2 + 2) * 6);
}

// linear_add (the residual add folded into the product's store) gives the bits of linear into a
// scratch then add (Backend's default, both CUDA launches) in every layout of kLinearLayoutNames,
// at o's shape and odd ones, at every row count the batch test uses; where it folds (BF16 on
// tensor cores: every case here) the scratch stays untouched (poisoned), and every element of y is
// written once (a residual of large and small values, signed zeros among them).
TEST(CudaFusedKernels, LinearAddEqualsLinearThenAddBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
  const PinnedLinearLayouts pinned(b);
  std::mt19937 gen(19);
  std::normal_distribution<float> normal;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {4096, 2048}, {144, 37}, {2050, 48}, {64, 128}, {768, 1024}};
  int checked = 0, folded = 0;
  for (const auto& [in, out] : shapes)
    for (const int64_t rows : {1, 2, 3, 8, 64, 100}) {
      std::vector<uint16_t> host(static_cast<size_t>(out * in));
      for (auto& v : host) v = f32_to_bf16(normal(gen) * 0.05f);
      auto wd = b.alloc(host.size() * 2);
      b.upload(wd->data(), host.data(), host.size() * 2);
      const LinearWeight w{WeightFormat::BF16, out, in, wd->data(), nullptr, 1.0f};
      std::vector<float> x(static_cast<size_t>(rows * in)), y0(static_cast<size_t>(rows * out));
      for (auto& v : x) v = normal(gen);
      for (size_t i = 0; i < y0.size(); ++i) y0[i] = normal(gen) * (i % 3 == 0 ? 1000.0f : 1.0f);
      y0[0] = -0.0f;
      auto xd = b.alloc(x.size() * 4);
      b.upload(xd->data(), x.data(), x.size() * 4);
      // Runs: the default's two calls, then linear_add; in each layout of kLinearLayoutNames.
      std::vector<float> got[2 * kLinearLayouts];
      for (int run = 0; run < 2 * kLinearLayouts; ++run) {
        const bool fused = run % 2 == 1;
        use_linear_layout(b, run / 2);
        auto yd = b.alloc(y0.size() * 4);
        b.upload(yd->data(), y0.data(), y0.size() * 4);
        auto scratch = b.alloc(y0.size() * 4);
        poison(b, scratch->f32(), rows * out);
        if (fused)
          b.linear_add(w, xd->f32(), rows, scratch->f32(), yd->f32());
        else
          b.Backend::linear_add(w, xd->f32(), rows, scratch->f32(), yd->f32());
        got[run].resize(y0.size());
        b.download(got[run].data(), yd->data(), y0.size() * 4);
        if (fused) {
          std::vector<uint32_t> h(y0.size());
          b.download(h.data(), scratch->data(), h.size() * 4);
          const bool untouched =
              std::all_of(h.begin(), h.end(), [](uint32_t v) { return v == 0xffffffffu; });
          EXPECT_TRUE(untouched) << out << "x" << in << " rows " << rows << " run " << run;
          folded += untouched;
        }
      }
      EXPECT_TRUE(
          std::all_of(got[1].begin(), got[1].end(), [](float v) { return std::isfinite(v); }))
          << out << "x" << in << " rows " << rows;
      for (int run = 1; run < 2 * kLinearLayouts; ++run)
        EXPECT_EQ(std::memcmp(got[0].data(), got[run].data(), got[0].size() * 4), 0)
            << out << "x" << in << " rows " << rows << " run " << run
            << (run % 2 ? " (linear_add), " : " (linear then add), ")
            << kLinearLayoutNames[run / 2];
      ++checked;
    }
  EXPECT_EQ(checked, 5 * 6);
  EXPECT_EQ(folded, 5 * 6 * kLinearLayouts);
}

// expert_sum (the combine started from zero, its output never read) gives the bits of fill with
// zeros then expert_combine (Backend's default), and expert_sum_add (that sum added to a
// residual in the same launch) the bits of expert_sum into a scratch then add, leaving the
// scratch untouched: at the bench's hidden size, odd sizes, 1 to 9 ranks and every row count the
// batch test uses, with a signed zero term. Outputs and scratch start poisoned (all-one bits)
// so an element the fused call leaves unwritten or reads shows.
TEST(CudaFusedKernels, ExpertSumAndSumAddEqualTheirDefaultsBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto dev = [&](const std::vector<float>& h) {
    auto d = b.alloc(std::max<size_t>(h.size(), 1) * 4);
    b.upload(d->data(), h.data(), h.size() * 4);
    return d;
  };
  int checked = 0;
  for (const int64_t dim : {2048, 2049, 4500, 33})
    for (const int64_t rows : {1, 2, 3, 8, 64})
      for (const int64_t k : {1, 8, 9}) {
        std::vector<float> e(static_cast<size_t>(rows * k * dim)),
            wt(static_cast<size_t>(rows * k));
        for (auto& v : e) v = normal(gen);
        for (auto& v : wt) v = std::fabs(normal(gen)) * 0.1f;
        if (rows * k >= 2) e[1] = -0.0f;  // a signed zero term: 0 + (-0 * w) is +0 in both forms
        std::vector<float> residual(static_cast<size_t>(rows * dim));
        for (auto& v : residual) v = normal(gen) * 100.0f;
        residual[0] = -0.0f;
        auto ed = dev(e), wtd = dev(wt);
        std::vector<float> sum[2], sum_add[2];
        for (int fused = 0; fused < 2; ++fused) {
          auto yd = b.alloc(static_cast<size_t>(rows * dim) * 4);
          poison(b, yd->f32(), rows * dim);
          if (fused)
            b.expert_sum(ed->f32(), wtd->f32(), rows, k, dim, yd->f32());
          else
            b.Backend::expert_sum(ed->f32(), wtd->f32(), rows, k, dim, yd->f32());
          sum[fused].resize(static_cast<size_t>(rows * dim));
          b.download(sum[fused].data(), yd->data(), sum[fused].size() * 4);
          auto rd = dev(residual), scratch = b.alloc(residual.size() * 4);
          poison(b, scratch->f32(), rows * dim);
          if (fused)
            b.expert_sum_add(ed->f32(), wtd->f32(), rows, k, dim, scratch->f32(), rd->f32());
          else
            b.Backend::expert_sum_add(ed->f32(), wtd->f32(), rows, k, dim, scratch->f32(),
                                      rd->f32());
          sum_add[fused].resize(residual.size());
          b.download(sum_add[fused].data(), rd->data(), residual.size() * 4);
          if (fused) {
            std::vector<uint32_t> h(residual.size());
            b.download(h.data(), scratch->data(), h.size() * 4);
            EXPECT_TRUE(
                std::all_of(h.begin(), h.end(), [](uint32_t v) { return v == 0xffffffffu; }))
                << "expert_sum_add wrote its scratch, k " << k << " dim " << dim << " rows "
                << rows;
          }
        }
        EXPECT_EQ(std::memcmp(sum[0].data(), sum[1].data(), sum[0].size() * 4), 0)
            << "expert_sum k " << k << " dim " << dim << " rows " << rows;
        EXPECT_TRUE(std::all_of(sum_add[1].begin(), sum_add[1].end(),
                                [](float v) { return std::isfinite(v); }))
            << "expert_sum_add k " << k << " dim " << dim << " rows " << rows;
        EXPECT_EQ(std::memcmp(sum_add[0].data(), sum_add[1].data(), sum_add[0].size() * 4), 0)
            << "expert_sum_add k " << k << " dim " << dim << " rows " << rows;
        ++checked;
      }
  EXPECT_EQ(checked, 4 * 5 * 3);
}

// expert_sum_add_norm in one launch gives bitwise Backend's default (expert_sum_add, then rms_norm
// of the new y) on CUDA: y and yn, at dims of both register layouts and the general one (2048,
// 2049, 4500) and a short one, rows 1 to 64, k 1, 8 and 9; its scratch stays unwritten.
TEST(CudaFusedKernels, ExpertSumAddNormEqualsSumAddThenNormBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
  std::mt19937 gen(29);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto dev = [&](const void* h, size_t bytes) {
    auto d = b.alloc(std::max<size_t>(bytes, 4));
    b.upload(d->data(), h, bytes);
    return d;
  };
  int checked = 0;
  for (const int64_t dim : {2048, 2049, 4500, 33})
    for (const int64_t rows : {1, 2, 3, 8, 64})
      for (const int64_t k : {1, 8, 9}) {
        std::vector<float> e(static_cast<size_t>(rows * k * dim)),
            wt(static_cast<size_t>(rows * k));
        for (auto& v : e) v = normal(gen);
        for (auto& v : wt) v = std::fabs(normal(gen)) * 0.1f;
        std::vector<float> residual(static_cast<size_t>(rows * dim));
        for (auto& v : residual) v = normal(gen) * 10.0f;
        std::vector<uint16_t> nw(static_cast<size_t>(dim));
        for (auto& v : nw) v = f32_to_bf16(1.0f + 0.2f * normal(gen));
        auto ed = dev(e.data(), e.size() * 4), wtd = dev(wt.data(), wt.size() * 4),
             nd = dev(nw.data(), nw.size() * 2);
        std::vector<float> y[2], yn[2];
        for (int fused = 0; fused < 2; ++fused) {
          auto rd = dev(residual.data(), residual.size() * 4),
               scratch = b.alloc(residual.size() * 4), ynd = b.alloc(residual.size() * 4);
          poison(b, scratch->f32(), rows * dim);
          poison(b, ynd->f32(), rows * dim);
          const auto* n16 = static_cast<const uint16_t*>(nd->data());
          if (fused)
            b.expert_sum_add_norm(ed->f32(), wtd->f32(), rows, k, dim, scratch->f32(), rd->f32(),
                                  n16, 1e-6f, ynd->f32());
          else
            b.Backend::expert_sum_add_norm(ed->f32(), wtd->f32(), rows, k, dim, scratch->f32(),
                                           rd->f32(), n16, 1e-6f, ynd->f32());
          y[fused].resize(residual.size());
          yn[fused].resize(residual.size());
          b.download(y[fused].data(), rd->data(), residual.size() * 4);
          b.download(yn[fused].data(), ynd->data(), residual.size() * 4);
          if (fused) {
            std::vector<uint32_t> h(residual.size());
            b.download(h.data(), scratch->data(), h.size() * 4);
            EXPECT_TRUE(
                std::all_of(h.begin(), h.end(), [](uint32_t v) { return v == 0xffffffffu; }))
                << "expert_sum_add_norm wrote its scratch, k " << k << " dim " << dim;
          }
        }
        const std::string where = "k " + std::to_string(k) + " dim " + std::to_string(dim) +
                                  " rows " + std::to_string(rows);
        EXPECT_TRUE(std::all_of(yn[1].begin(), yn[1].end(), [](float v) {
          return std::isfinite(v);
        })) << where;
        EXPECT_EQ(std::memcmp(y[0].data(), y[1].data(), y[0].size() * 4), 0) << "y " << where;
        EXPECT_EQ(std::memcmp(yn[0].data(), yn[1].data(), yn[0].size() * 4), 0) << "yn " << where;
        ++checked;
      }
  EXPECT_EQ(checked, 4 * 5 * 3);
}

// route_topk takes two paths (backend/cuda/moe.cu): stored experts in increasing original id skip
// the count behind the id rank, others count it. The same experts stored in a shuffled order (their
// logit columns and ids permuted together) must choose the same original ids in the same ranks with
// bitwise the same weights, at rows 1, 2, 3 and 64, 128 experts of 128 and a pruned 96 of 128
// (every third id left out), k 8 and 1, with and without renormalisation, rows of near-ties and
// exact ties among them; a row holding NaN gets the first k stored experts and NaN weights.
TEST(CudaRouting, StoredOrderChangesNothingBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
  std::mt19937 gen(23);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  int checked = 0;
  for (const int64_t experts_kept : {128, 96})
    for (const int64_t rows : {1, 2, 3, 64})
      for (const int64_t k : {8, 1})
        for (const bool norm : {true, false}) {
          const int64_t width = 128;  // logit columns a row (the unpruned router's outputs)
          std::vector<int32_t> id;    // the kept original ids, increasing
          for (int32_t e = 0; id.size() < static_cast<size_t>(experts_kept); ++e)
            if (experts_kept == width || e % 3 != 2) id.push_back(e);
          std::vector<float> logits(static_cast<size_t>(rows * width));
          for (auto& v : logits) v = normal(gen);
          if (rows > 1)  // exact ties across row 1
            for (int64_t c = 0; c < width; ++c)
              logits[width + c] = static_cast<float>(c % 3) * 0.5f;
          logits[static_cast<size_t>(id[5])] = 4.0015f;  // a near-tie on top of row 0
          logits[static_cast<size_t>(id[9])] = 4.0014f;
          std::vector<int32_t> order(id.size());
          std::iota(order.begin(), order.end(), 0);
          std::vector<int32_t> shuffled = order;
          std::shuffle(shuffled.begin(), shuffled.end(), gen);
          std::vector<int32_t> chosen_id[2];
          std::vector<uint32_t> w_bits[2];
          for (int pass = 0; pass < 2; ++pass) {
            const std::vector<int32_t>& perm = pass ? shuffled : order;
            std::vector<int32_t> col(perm.size()), oid(perm.size());
            for (size_t s = 0; s < perm.size(); ++s) col[s] = oid[s] = id[perm[s]];
            auto ld = b.alloc(logits.size() * 4), cd = b.alloc(col.size() * 4),
                 od = b.alloc(oid.size() * 4), xd = b.alloc(static_cast<size_t>(rows * k) * 4),
                 wd = b.alloc(static_cast<size_t>(rows * k) * 4);
            b.upload(ld->data(), logits.data(), logits.size() * 4);
            b.upload(cd->data(), col.data(), col.size() * 4);
            b.upload(od->data(), oid.data(), oid.size() * 4);
            b.route_topk(ld->f32(), rows, width, static_cast<const int32_t*>(cd->data()),
                         static_cast<const int32_t*>(od->data()), experts_kept, k, norm,
                         static_cast<int32_t*>(xd->data()), wd->f32());
            std::vector<int32_t> index(static_cast<size_t>(rows * k));
            w_bits[pass].resize(index.size());
            b.download(index.data(), xd->data(), index.size() * 4);
            b.download(w_bits[pass].data(), wd->data(), index.size() * 4);
            for (int32_t s : index) {
              ASSERT_TRUE(s >= 0 && s < experts_kept) << "index " << s;
              chosen_id[pass].push_back(oid[static_cast<size_t>(s)]);
            }
          }
          const std::string where = "experts " + std::to_string(experts_kept) + " rows " +
                                    std::to_string(rows) + " k " + std::to_string(k) +
                                    (norm ? " norm" : "");
          EXPECT_EQ(chosen_id[0], chosen_id[1]) << where;
          EXPECT_EQ(w_bits[0], w_bits[1]) << where;
          ++checked;
        }
  EXPECT_EQ(checked, 2 * 4 * 2 * 2);
  // A row holding NaN: the first k stored experts, NaN weights.
  std::vector<float> logits(128, 1.0f);
  logits[40] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> col(128);
  std::iota(col.begin(), col.end(), 0);
  std::reverse(col.begin(), col.end());  // ids decreasing: the counting path
  auto ld = b.alloc(128 * 4), cd = b.alloc(128 * 4), xd = b.alloc(8 * 4), wd = b.alloc(8 * 4);
  b.upload(ld->data(), logits.data(), 128 * 4);
  b.upload(cd->data(), col.data(), 128 * 4);
  b.route_topk(ld->f32(), 1, 128, static_cast<const int32_t*>(cd->data()),
               static_cast<const int32_t*>(cd->data()), 128, 8, true,
               static_cast<int32_t*>(xd->data()), wd->f32());
  std::vector<int32_t> index(8);
  std::vector<float> w(8);
  b.download(index.data(), xd->data(), 32);
  b.download(w.data(), wd->data(), 32);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(index[j], j);
    EXPECT_TRUE(std::isnan(w[j])) << j;
  }
}

// The grouped expert kernels (all rows' experts in three launches, the choice on the device) give
// for every (row, rank) the bits of the separate gate, up, swiglu and down calls on that row
// alone, for batches of 1, 2, 3, 8 and 64 rows, NVFP4 and BF16 experts. The separate calls run the
// CUDA-core products (DRAMA_CUDA_LINEAR=cores), whose dot products (linear_dot.cuh) the grouped
// kernels of versions 1 and 2 share: BF16 linear() itself runs on tensor cores, the same products
// accumulated in another order (its own bitwise checks: the batch invariance test above and the
// contract).
TEST(CudaGroupedExperts, EqualSeparateCallsOnEachRowAloneBitwise) {
  REQUIRE_CUDA(cuda);
  Backend& b = *cuda;
#ifdef DRAMA_WITH_CUDA
  // Versions 1 and 2 share those dot products; version 3 (tensor cores) is checked against them by
  // the contract and the batch invariance test above, so under it this test runs version 2.
  const bool tensor_before = cuda::set_tensor_linear(b, false);
  const int version_before = cuda::set_moe_experts_version(b, 2);
  if (version_before == 1) cuda::set_moe_experts_version(b, 1);
  const AtExit restore{[&b, tensor_before, version_before] {
    cuda::set_tensor_linear(b, tensor_before);
    cuda::set_moe_experts_version(b, version_before);
  }};
#endif
  for (const auto& [name, flags] :
       {std::pair{"tiny-nvfp4", "--nvfp4"}, std::pair{"tiny-bf16", ""}}) {
    const Checkpoint ckpt(testing::make_checkpoint(name, flags));
    const Drama3Config& c = ckpt.config();
    const ModelWeights resident = make_resident(b, ckpt.weights(), c);
    const LayerWeights* moe = nullptr;
    for (const auto& l : resident.backbone)
      if (!l.dense && !moe) moe = &l;
    ASSERT_NE(moe, nullptr);
    const auto& ex = moe->moe.experts;
    const int64_t n_stored = static_cast<int64_t>(ex.size()), H = c.backbone.hidden_size;
    const int64_t I = ex[0].gate.out, k = std::min<int64_t>(c.moe.experts_per_token, n_stored);
    std::vector<ExpertWeights> table;
    for (const auto& e : ex) table.push_back({e.gate, e.up, e.down});
    std::mt19937 gen(11);
    std::normal_distribution<float> normal;
    const int64_t max_rows = 64;
    std::vector<float> x(static_cast<size_t>(max_rows * H));
    for (auto& v : x) v = normal(gen);
    std::vector<int32_t> choice(static_cast<size_t>(max_rows * k));
    for (int64_t r = 0; r < max_rows; ++r) {
      std::vector<int32_t> ids(static_cast<size_t>(n_stored));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), gen);
      for (int64_t j = 0; j < k; ++j) choice[r * k + j] = ids[j];
    }
    auto xd = b.alloc(x.size() * 4), idd = b.alloc(choice.size() * 4),
         out = b.alloc(static_cast<size_t>(max_rows * k * H) * 4),
         ws = b.alloc(
             static_cast<size_t>(Backend::moe_workspace_floats(max_rows, k, H, I, n_stored)) * 4),
         g = b.alloc(I * 4), u = b.alloc(I * 4), a = b.alloc(I * 4), y = b.alloc(H * 4);
    b.upload(xd->data(), x.data(), x.size() * 4);
    b.upload(idd->data(), choice.data(), choice.size() * 4);
    std::vector<float> grouped(static_cast<size_t>(max_rows * k * H)), alone(H);
    int checked = 0;
    const int64_t ws_floats = Backend::moe_workspace_floats(max_rows, k, H, I, n_stored);
    for (int64_t rows : {1, 2, 3, 8, 64}) {
      poison(b, ws->f32(), ws_floats);
      b.moe_experts(table.data(), n_stored, xd->f32(), rows, H,
                    static_cast<const int32_t*>(idd->data()), k, k, out->f32(), ws->f32());
      b.download(grouped.data(), out->data(), static_cast<size_t>(rows * k * H) * 4);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const auto& e = ex[choice[r * k + j]];
          b.linear(e.gate, xd->f32() + r * H, 1, g->f32());
          b.linear(e.up, xd->f32() + r * H, 1, u->f32());
          b.swiglu(g->f32(), u->f32(), I, a->f32());
          b.linear(e.down, a->f32(), 1, y->f32());
          b.download(alone.data(), y->data(), alone.size() * 4);
          ASSERT_EQ(std::memcmp(alone.data(), grouped.data() + (r * k + j) * H, H * 4), 0)
              << name << " row " << r << " rank " << j << " of " << rows << " rows";
          ++checked;
        }
    }
    std::printf("%s: %d (row, rank) expert outputs bitwise equal to the separate calls\n", name,
                checked);
  }
}

// Version 3's decode of NVFP4 weights (mma.cuh: E2M1 codes through byte tables, their signs by a
// sign-replicating byte permute, times the block scale in bfloat16) gives the reference's values
// (util/dtype.h: e2m1 times e4m3, exact in float32 and in bfloat16) for every 16-bit pattern of
// four codes in both halves of a word and every E4M3 block scale, NaN for a NaN scale. The layouts
// test below compares version 3 only with itself; this is what ties its weights to the format.
TEST(CudaGroupedExperts, E2m1DecodeEqualsTheReference) {
  REQUIRE_CUDA(cuda);
#ifdef DRAMA_WITH_CUDA
  std::vector<uint32_t> words(65536);
  for (uint32_t p = 0; p < 65536; ++p)  // pattern p low, another pattern high
    words[p] = p | (((p * 40503u) & 0xffffu) << 16);
  int64_t checked = 0;
  for (int scale = 0; scale < 256; ++scale) {
    const std::vector<uint16_t> got =
        cuda::decode_nvfp4_words(*cuda, words, static_cast<uint8_t>(scale));
    const float sf = e4m3_to_f32(static_cast<uint8_t>(scale));
    uint16_t want[16];
    for (int c = 0; c < 16; ++c) {
      const float v = e2m1_to_f32(static_cast<uint8_t>(c)) * sf;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      ASSERT_TRUE(std::isnan(v) || (bits & 0xffffu) == 0) << "not exact in bfloat16";
      want[c] = static_cast<uint16_t>(bits >> 16);
    }
    for (size_t i = 0; i < words.size(); ++i)
      for (int j = 0; j < 8; ++j) {
        const int code = static_cast<int>((words[i] >> (4 * j)) & 15);
        const uint16_t g = got[8 * i + j];
        if (std::isnan(sf)) {
          ASSERT_EQ(g & 0x7f80, 0x7f80) << "scale " << scale << " code " << code;
          ASSERT_NE(g & 0x7f, 0) << "scale " << scale << " code " << code << ": not NaN";
        } else {
          ASSERT_EQ(g, want[code])
              << "scale " << scale << " word " << words[i] << " place " << j << " code " << code;
        }
        ++checked;
      }
  }
  EXPECT_EQ(checked, int64_t{256} * 65536 * 8);
  std::printf("%lld decoded weights equal the reference (every code in every place, every scale)\n",
              static_cast<long long>(checked));
#endif
}

// The layouts of one arithmetic give the same bits: versions 1 and 2 of the grouped expert kernels
// (DRAMA_CUDA_EXPERTS=v1|v2, moe.cuh), and version 3 in its own layout and its wide one (the
// layout many pairs an expert pick for it: DRAMA_CUDA_WIDE_ROWS); random NVFP4 experts at the
// bench's expert shape (hidden 2048, intermediate 768) and at small and odd shapes (scale rows that
// are not multiples of 16 bytes, tail column blocks, an activation matrix not on 16 bytes, more
// output slots than ranks), for 1, 2, 3, 8 and 64 rows and three expert mixes (random distinct
// experts per row, every row the same experts, rows on disjoint experts as far as they go). Version
// 1 equals the separate calls (the test above), so version 2 does too. Version 3 reads its
// activations split ahead into their three bfloat16 terms (the grouping kernel's further blocks
// split x, the gate/up product writes act split); its own layout can still split them in the
// kernel (set_split_ahead(false), as before 2026-12-05), and the two are compared too, as are its
// down at one column tile a block and at two (set_v3_down_tiles; two in the other pairs, and in
// the fourth pair the two-tile side also splits in the kernel, so both instances of two tiles
// run). (Up to
// 2026-12-04 this test was VersionTwoEqualsVersionOneBitwise.)
TEST(CudaGroupedExperts, LayoutsOfOneArithmeticEqualBitwise) {
  REQUIRE_CUDA(cuda);
#ifdef DRAMA_WITH_CUDA
  Backend& b = *cuda;
  // Two runs compared bitwise: (version, v3 wide rows, v3 split ahead) each. Version 3 in its own
  // layout (wide never) and in the wide one (from one row on): one arithmetic, two layouts
  // (moe.cu); its own layout splitting the activations in the kernel and reading them split.
  struct Layouts {
    const char* name[2];
    int version[2];
    int64_t wide_rows[2];
    bool ahead[2];
    int down_tiles[2];
  };
  const Layouts layouts[] = {
      {{"v1", "v2"}, {1, 2}, {0, 0}, {true, true}, {2, 2}},
      {{"v3", "v3 wide"}, {3, 3}, {0, 1}, {true, true}, {2, 2}},
      {{"v3 split in the kernel", "v3"}, {3, 3}, {0, 0}, {false, true}, {2, 2}},
      {{"v3 down a tile a block", "v3 down two tiles a block, split in the kernel"},
       {3, 3},
       {0, 0},
       {true, false},
       {1, 2}}};
  const int version_before = cuda::set_moe_experts_version(b, 2);
  const int64_t wide_before = cuda::set_wide_rows(b, 0);
  const bool ahead_before = cuda::set_split_ahead(b, true);
  const int tiles_before = cuda::set_v3_down_tiles(b, 2);
  const AtExit restore{[&b, version_before, wide_before, ahead_before, tiles_before] {
    cuda::set_moe_experts_version(b, version_before);
    cuda::set_wide_rows(b, wide_before);
    cuda::set_split_ahead(b, ahead_before);
    cuda::set_v3_down_tiles(b, tiles_before);
  }};
  struct Shape {
    int64_t hidden, inter, n_stored, k, extra_slots, x_offset;
  };
  const Shape shapes[] = {{2048, 768, 32, 8, 0, 0},
                          {64, 32, 8, 2, 0, 0},
                          {144, 80, 6, 3, 1, 1},
                          {512, 48, 16, 4, 0, 1}};
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::mt19937 gen(13);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (const Shape& sh : shapes) {
    const int64_t H = sh.hidden, I = sh.inter, n_stored = sh.n_stored, k = sh.k;
    // 128 rows: bench-30b-a3b's 2048 x 768 experts at 32 pairs each, where the wide gate/up
    // and down go in passes of 32 pairs (moe.cu, kWide4TilePairs) with whole chunks.
    const int64_t slots = k + sh.extra_slots, max_rows = 128;
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    // One NVFP4 weight [out, in]: random codes (every E2M1 code is a value), positive E4M3 block
    // scales between 2^-4 and 2^4, a global scale near 1/64.
    auto nvfp4 = [&](int64_t out, int64_t in) {
      std::vector<uint8_t> codes(static_cast<size_t>(out * in / 2)),
          scales(static_cast<size_t>(out * in / 16));
      for (size_t i = 0; i < codes.size(); i += 8) {
        const uint64_t r = next();
        std::memcpy(codes.data() + i, &r, std::min<size_t>(8, codes.size() - i));
      }
      for (auto& v : scales) {
        const uint64_t r = next();
        v = static_cast<uint8_t>(((3 + r % 9) << 3) | ((r >> 8) & 7));
      }
      keep.push_back(b.alloc(codes.size()));
      b.upload(keep.back()->data(), codes.data(), codes.size());
      const void* data = keep.back()->data();
      keep.push_back(b.alloc(scales.size()));
      b.upload(keep.back()->data(), scales.data(), scales.size());
      LinearWeight w;
      w.format = WeightFormat::NVFP4;
      w.out = out;
      w.in = in;
      w.data = data;
      w.scales = static_cast<const uint8_t*>(keep.back()->data());
      w.scale2 = (0.5f + static_cast<float>(next() % 1024) / 1024.0f) / 64.0f;
      return w;
    };
    std::vector<ExpertWeights> table;
    for (int64_t e = 0; e < n_stored; ++e) table.push_back({nvfp4(I, H), nvfp4(I, H), nvfp4(H, I)});
    std::vector<float> x(static_cast<size_t>(max_rows * H + sh.x_offset));
    for (auto& v : x) v = normal(gen);
    const int64_t ws_floats = Backend::moe_workspace_floats(max_rows, k, H, I, n_stored);
    auto xd = b.alloc(x.size() * 4), idd = b.alloc(static_cast<size_t>(max_rows * k) * 4),
         out = b.alloc(static_cast<size_t>(max_rows * slots * H) * 4),
         ws = b.alloc(static_cast<size_t>(ws_floats) * 4);
    b.upload(xd->data(), x.data(), x.size() * 4);
    const float* xp = xd->f32() + sh.x_offset;
    const std::vector<float> zeros(static_cast<size_t>(max_rows * slots * H), 0.0f);
    std::vector<float> v1(zeros.size()), v2(zeros.size());
    for (int mix = 0; mix < 3; ++mix) {
      std::vector<int32_t> choice(static_cast<size_t>(max_rows * k));
      std::vector<int32_t> ids(static_cast<size_t>(n_stored));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), gen);
      for (int64_t r = 0; r < max_rows; ++r) {
        if (mix == 0) std::shuffle(ids.begin(), ids.end(), gen);
        for (int64_t j = 0; j < k; ++j)
          choice[r * k + j] = mix == 2 ? static_cast<int32_t>((r * k + j) % n_stored) : ids[j];
      }
      b.upload(idd->data(), choice.data(), choice.size() * 4);
      for (int64_t rows : {1, 2, 3, 8, 64, 128}) {
        const size_t n = static_cast<size_t>(rows * slots * H);
        std::ostringstream call;
        call << "hidden " << H << " inter " << I << " stored " << n_stored << " k " << k
             << " slots " << slots << " x offset " << sh.x_offset << " mix " << mix << " rows "
             << rows;
        for (const Layouts& lay : layouts) {
          for (int which = 0; which < 2; ++which) {
            cuda::set_moe_experts_version(b, lay.version[which]);
            cuda::set_wide_rows(b, lay.wide_rows[which]);
            cuda::set_split_ahead(b, lay.ahead[which]);
            cuda::set_v3_down_tiles(b, lay.down_tiles[which]);
            b.upload(out->data(), zeros.data(), n * 4);
            poison(b, ws->f32(), ws_floats);  // a read of workspace the call did not write: NaN
            b.moe_experts(table.data(), n_stored, xp, rows, H,
                          static_cast<const int32_t*>(idd->data()), k, slots, out->f32(),
                          ws->f32());
            std::vector<float>& got = which == 0 ? v1 : v2;
            b.download(got.data(), out->data(), n * 4);
            // Inputs and weights are finite and far from overflow, so every output is finite.
            for (size_t i = 0; i < n; ++i)
              ASSERT_TRUE(std::isfinite(got[i]))
                  << call.str() << ": " << lay.name[which] << " gave " << got[i] << " at row "
                  << i / (slots * H) << " slot " << i / H % slots << " column " << i % H;
          }
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(std::memcmp(&v1[i], &v2[i], 4), 0)
                << call.str() << " element " << i << ": " << lay.name[0] << " " << v1[i] << " "
                << lay.name[1] << " " << v2[i];
          float norm = 0.0f;
          for (size_t i = 0; i < n; ++i) norm += std::fabs(v1[i]);
          ASSERT_GT(norm, 0.0f) << call.str();  // a vacuous all-zero pass is impossible
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 3 * 6 * 4);  // shapes, mixes, row counts, pairs of layouts
  std::printf(
      "%d (shape, mix, rows, layouts) grouped expert calls bitwise equal: v1 and v2, v3 and v3 "
      "wide, v3 splitting in the kernel and ahead, v3's down a column tile a block and two (the "
      "other pairs: two)\n",
      checked);
#endif
}

// Attention version 2's quad layout (128 threads a head, where its blocks are few) gives the bits
// of its warp-a-head layout for every output (attention.cu), and a window that no span reaches
// (the model passes the KV cache's capacity) gives the bits of no window in versions 1 and 2 while
// it bounds the launch's splits. Compared bitwise at the configs'
// head shapes, at head_dim 256 with 6 query heads a KV head and at 6 heads a KV head of 4, for 1, 3
// and 40 rows (at 4 KV heads 40 rows make 160 >= 132 blocks: a block takes all of a KV head's query
// heads, 8 or 6, else 2 or 1), spans of one split (up to 128 positions) and of several (merged),
// with and without a window, each row with its cache rows elsewhere (cache_row0).
TEST(CudaAttention, QuadLayoutAndSplitsBoundEqualBitwise) {
  REQUIRE_CUDA(cuda);
#ifdef DRAMA_WITH_CUDA
  Backend& b = *cuda;
  const int version_before = cuda::set_attention_version(b, 2);
  const int quad_before = cuda::set_attention_quad(b, 0);
  const AtExit restore{[&b, version_before, quad_before] {
    cuda::set_attention_version(b, version_before);
    cuda::set_attention_quad(b, quad_before);
  }};
  struct Shape {
    int64_t n_heads, n_kv_heads, head_dim;
  };
  const Shape shapes[] = {{32, 4, 128}, {4, 2, 16},   {8, 2, 32},  {8, 8, 64},
                          {16, 4, 64},  {12, 2, 256}, {24, 4, 128}};
  std::mt19937 gen(17);
  std::normal_distribution<float> normal;
  const int64_t max_rows = 40, max_positions = 700;
  int checked = 0;
  for (const Shape& sh : shapes) {
    const int64_t nh = sh.n_heads, nkv = sh.n_kv_heads, hd = sh.head_dim;
    const int64_t q_elems = nh * hd, kv_elems = nkv * hd;
    std::vector<float> q(static_cast<size_t>(max_rows * q_elems)),
        kv(static_cast<size_t>(max_rows * max_positions * kv_elems));
    for (auto& v : q) v = 2.0f * normal(gen);
    for (auto& v : kv) v = normal(gen);
    auto qd = b.alloc(q.size() * 4), kd = b.alloc(kv.size() * 4), vd = b.alloc(kv.size() * 4),
         pd = b.alloc(static_cast<size_t>(max_rows) * 4),
         rd = b.alloc(static_cast<size_t>(max_rows) * 4),
         yd = b.alloc(static_cast<size_t>(max_rows * q_elems) * 4);
    b.upload(qd->data(), q.data(), q.size() * 4);
    b.upload(kd->data(), kv.data(), kv.size() * 4);
    std::shuffle(kv.begin(), kv.end(), gen);
    b.upload(vd->data(), kv.data(), kv.size() * 4);
    std::vector<int32_t> row0(max_rows);
    for (int64_t r = 0; r < max_rows; ++r) row0[r] = static_cast<int32_t>(r * max_positions);
    std::shuffle(row0.begin(), row0.end(), gen);
    b.upload(rd->data(), row0.data(), row0.size() * 4);
    for (int64_t longest : {int64_t{100}, max_positions}) {
      std::vector<int32_t> pos(max_rows);
      std::uniform_int_distribution<int32_t> at(0, static_cast<int32_t>(longest - 1));
      for (auto& p : pos) p = at(gen);
      pos[0] = static_cast<int32_t>(longest - 1);
      b.upload(pd->data(), pos.data(), pos.size() * 4);
      // Version 2's results with no window, by row count, and version 1's.
      std::map<int64_t, std::vector<float>> unwindowed, unwindowed_v1;
      auto run = [&](int64_t rows, int64_t window, std::vector<float>& got) {
        poison(b, yd->f32(), rows * q_elems);
        b.attention(qd->f32(), rows, static_cast<const int32_t*>(pd->data()),
                    static_cast<const int32_t*>(rd->data()), kd->f32(), vd->f32(), nh, nkv, hd,
                    window, yd->f32());
        got.resize(static_cast<size_t>(rows * q_elems));
        b.download(got.data(), yd->data(), got.size() * 4);
      };
      auto equal = [](const std::vector<float>& a, const std::vector<float>& c) {
        return a.size() == c.size() && std::memcmp(a.data(), c.data(), a.size() * 4) == 0;
      };
      // A window of `longest` cuts nothing (every position is below it) but bounds the launch's
      // splits (attention.cu): the bits of no window.
      for (int64_t window : {int64_t{0}, int64_t{70}, longest}) {
        for (int64_t rows : {1, 3, 40}) {
          std::vector<float> got[2];
          for (int which = 0; which < 2; ++which) {
            cuda::set_attention_quad(b, which);
            run(rows, window, got[which]);
          }
          std::ostringstream call;
          call << "heads " << nh << "/" << nkv << " head_dim " << hd << " longest " << longest
               << " window " << window << " rows " << rows;
          for (size_t i = 0; i < got[0].size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[0][i])) << call.str() << " element " << i;
            ASSERT_EQ(std::memcmp(&got[0][i], &got[1][i], 4), 0)
                << call.str() << " element " << i << ": a warp a head " << got[0][i] << ", quad "
                << got[1][i];
          }
          std::vector<float> v1;
          cuda::set_attention_version(b, 1);
          run(rows, window, v1);
          cuda::set_attention_version(b, 2);
          if (window == 0) {
            unwindowed[rows] = got[0];
            unwindowed_v1[rows] = v1;
          } else if (window == longest) {
            ASSERT_TRUE(equal(got[0], unwindowed[rows])) << call.str() << ": not no window's bits";
            ASSERT_TRUE(equal(v1, unwindowed_v1[rows]))
                << call.str() << ": version 1 not no window's bits";
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 7 * 2 * 3 * 3);  // shapes, spans, windows, row counts
  std::printf(
      "%d attention calls bitwise equal in the quad layout and a warp a head; a window no span "
      "reaches gives no window's bits (versions 1 and 2)\n",
      checked);
#endif
}

// Lanes on CUDA (spec: "--lanes N ... without changing any request's bytes"): 12 requests, each
// alone on a one-lane CUDA model, then all of them on a 4-lane CUDA model joining as lanes free
// up: the same codes, byte for byte. A decode step reads the device once (the codes and flags)
// and allocates nothing. Requests as tests/model/test_sessions.cpp makes them, in short.
TEST(CudaLanes, TwelveRequestsOnFourLanesEqualEachAloneAndAStepReadsOnce) {
  REQUIRE_CUDA(cuda);
  const Checkpoint ckpt(testing::make_checkpoint("tiny-nvfp4", "--nvfp4"));
  const Drama3Config& c = ckpt.config();
  std::vector<SessionSpec> reqs;
  for (uint64_t s = 0; s < 12; ++s) {
    std::mt19937_64 rng(s);
    SessionSpec spec;
    GenerationOptions& o = spec.options;
    o.seed = 100 + s;
    o.gamma = s % 3 == 0 ? 1.0f : 1.5f;
    o.cfg = s % 2 ? CfgMode::Paired : CfgMode::Separate;
    o.max_frames = 2 + static_cast<int64_t>(rng() % 10);
    o.sampling = s % 4 == 1 ? SamplingParams{0.0f, 50, 1.0f} : SamplingParams{0.9f, 50, 1.0f};
    const std::string text = "lane request " + std::to_string(s) + std::string(rng() % 30, 'x');
    const Voice v = testing::random_voice(c, 3 + static_cast<int64_t>(rng() % 20), s, "a voice");
    spec.cond = s % 3 == 2 ? unconditional_prompt(c, text) : conditional_prompt(c, text, v);
    if (s % 3 == 1) spec.uncond = unconditional_prompt(c, text);
    reqs.push_back(std::move(spec));
  }
  // Each alone, on a backend that runs every step as it comes (no CUDA graph); the 4-lane model
  // below replays its decode steps from graphs.
  std::vector<std::vector<int32_t>> want;
  {
    setenv("DRAMA_CUDA_GRAPHS", "0", 1);
    std::unique_ptr<Backend> eager = make_backend({"cuda", 0});
    unsetenv("DRAMA_CUDA_GRAPHS");
    Drama3Model one(ckpt, *eager, {1, 128});
    for (const SessionSpec& r : reqs)
      want.push_back(one.generate(r.cond, r.uncond ? &*r.uncond : nullptr, r.options, {}).codes);
    EXPECT_EQ(one.counters().replayed_steps, 0);
  }
  Drama3Model many(ckpt, *cuda, {4, 16});
  std::vector<std::vector<int32_t>> got(reqs.size());
  std::map<uint64_t, size_t> of;
  size_t next = 0, done = 0;
  int64_t batched = 0, checked_steps = 0;
  for (int guard = 0; done < reqs.size() && guard < 10000; ++guard) {
    for (; next < reqs.size() && many.free_lanes() > 0; ++next) of[many.join(reqs[next])] = next;
    const bool decoding = many.counters().prefill_rows > 0 && many.active_sessions() == 4;
    const TransferCounters before = cuda->transfers();
    const std::vector<StepEvent> events = many.step();
    const TransferCounters after = cuda->transfers();
    int64_t made = 0;
    for (const StepEvent& e : events) made += !e.finished;
    batched += made >= 2;
    if (decoding && made == 4) {  // a pure decode step of four sessions
      EXPECT_EQ(after.d2h_calls - before.d2h_calls, 1u);
      EXPECT_EQ(after.allocs, before.allocs);
      ++checked_steps;
    }
    for (const StepEvent& e : events) {
      const size_t i = of.at(e.session);
      if (e.finished) {
        EXPECT_TRUE(e.error.empty()) << e.error;
        of.erase(e.session);
        ++done;
        continue;
      }
      got[i].insert(got[i].end(), e.codes.begin(), e.codes.end());
    }
  }
  ASSERT_EQ(done, reqs.size());
  EXPECT_GT(batched, 0);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  EXPECT_GT(many.counters().replayed_steps, 0);
  std::printf(
      "12 requests on 4 CUDA lanes: %lld batched steps, %lld decode steps checked for one "
      "read and no allocation, %lld of %lld steps replayed from CUDA graphs\n",
      static_cast<long long>(batched), static_cast<long long>(checked_steps),
      static_cast<long long>(many.counters().replayed_steps),
      static_cast<long long>(many.counters().steps));
}

}  // namespace
}  // namespace drama

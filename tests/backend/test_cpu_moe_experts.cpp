// moe_experts of the CPU backend runs every chosen expert's gate, up, SwiGLU and down products in
// one parallel loop over (expert, column group) units. Each output slot must be bitwise what the
// separate kernels give for that row alone (linear, swiglu, linear on one thread), for every ISA,
// weight format, thread count, wait mode and split rule, and the slots beyond k stay untouched.
#include "cpu_test_util.h"
#include "util/error.h"

namespace drama::test {
namespace {

constexpr uint32_t kSeed = 1212;

template <class W>
struct Expert {
  W gate, up, down;
  Expert(std::mt19937& rng, int64_t hidden, int64_t inter)
      : gate(rng, inter, hidden), up(rng, inter, hidden), down(rng, hidden, inter) {}
  ExpertWeights view() const { return {gate.view, up.view, down.view}; }
};

template <class W>
void check_format(cpu::Isa isa) {
  std::mt19937 rng(kSeed);
  // hidden: five 16-column groups; inter: three (a unit boundary inside every expert).
  const int64_t hidden = 80, inter = 48, n_stored = 6;
  std::vector<Expert<W>> experts;
  std::vector<ExpertWeights> views;
  for (int64_t s = 0; s < n_stored; ++s) experts.emplace_back(rng, hidden, inter);
  for (const auto& e : experts) views.push_back(e.view());
  cpu::CpuBackend one(1, isa);
  for (int64_t rows : {1, 2, 3, 8})
    for (int64_t k : {1, 2, 4}) {
      const int64_t slots = k + 1;  // one slot more, which moe_experts must not touch
      auto x = random_floats(rng, rows * hidden);
      std::vector<int32_t> index(rows * k);
      std::uniform_int_distribution<int> pick(0, n_stored - 2);  // the last expert never runs
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          int32_t s;
          do {
            s = pick(rng);
          } while (std::find(&index[r * k], &index[r * k + j], s) != &index[r * k + j]);
          index[r * k + j] = s;
        }
      // The separate kernels, one row at a time.
      std::vector<float> want(rows * slots * hidden, 7.0f), g(inter), u(inter), a(inter);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const ExpertWeights& e = views[index[r * k + j]];
          one.linear(e.gate, &x[r * hidden], 1, g.data());
          one.linear(e.up, &x[r * hidden], 1, u.data());
          one.swiglu(g.data(), u.data(), inter, a.data());
          one.linear(e.down, a.data(), 1, &want[(r * slots + j) * hidden]);
        }
      const auto floats = Backend::moe_workspace_floats(rows, k, hidden, inter, n_stored);
      for (auto wait : {cpu::ThreadPool::Wait::Spin, cpu::ThreadPool::Wait::Sleep})
        for (int threads : {1, 2, 3, 4, 7})
          for (double split : {0.0, cpu::ThreadPool::kAutoSplit}) {
            cpu::CpuBackend be(threads, isa, split, wait);
            std::vector<float> out(rows * slots * hidden, 7.0f), workspace(floats, NAN);
            be.moe_experts(views.data(), n_stored, x.data(), rows, hidden, index.data(), k, slots,
                           out.data(), workspace.data());
            ASSERT_TRUE(bitwise_equal(out.data(), want.data(), out.size()))
                << cpu::isa_name(isa) << " rows " << rows << " k " << k << " threads " << threads
                << " split " << split;
          }
    }
}

TEST(CpuMoeExperts, Nvfp4EqualsSeparateKernels) {
  std::printf("seed %u\n", kSeed);
  for (auto isa : supported_isas()) check_format<Nvfp4Weight>(isa);
}

TEST(CpuMoeExperts, Bf16EqualsSeparateKernels) {
  for (auto isa : supported_isas()) check_format<Bf16Weight>(isa);
}

TEST(CpuMoeExperts, InvalidIndexRefused) {
  std::mt19937 rng(kSeed);
  Expert<Bf16Weight> e(rng, 16, 16);
  const ExpertWeights view = e.view();
  const std::vector<float> x(16, 0.5f);
  const std::vector<int32_t> index = {1};
  std::vector<float> out(16, 7.0f), workspace(Backend::moe_workspace_floats(1, 1, 16, 16, 1));
  cpu::CpuBackend be(2, cpu::Isa::Scalar);
  EXPECT_THROW(
      be.moe_experts(&view, 1, x.data(), 1, 16, index.data(), 1, 1, out.data(), workspace.data()),
      Error);
  for (float v : out) EXPECT_EQ(v, 7.0f);
}

}  // namespace
}  // namespace drama::test

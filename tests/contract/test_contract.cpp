// The contract's own tests: the registry covers every backend kernel, a planted fault is named
// with its kernel and gate, and the power gate tells FP16 from BF16 on the activation kernels.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "contract/contract.h"
#include "util/dtype.h"

namespace drama::contract {
namespace {

// Every virtual kernel declared in backend.h (after the memory section) must be registered, so a
// new kernel cannot skip the contract.
TEST(ContractRegistry, CoversEveryBackendKernel) {
  const char* src = std::getenv("DRAMA_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  std::ifstream in(std::string(src) + "/src/backend/backend.h");
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const size_t start = all.find("// --- matrix products ---");
  ASSERT_NE(start, std::string::npos);
  // The kernels end where the protected memory hooks (alloc_impl, ...) begin.
  const size_t end = all.find("\n protected:", start);
  ASSERT_NE(end, std::string::npos);
  const std::string kernels = all.substr(start, end - start);
  // Each kernel is declared as `virtual <type> name(`: the identifier before the first '('.
  std::set<std::string> declared;
  for (size_t at = kernels.find("virtual "); at != std::string::npos;
       at = kernels.find("virtual ", at + 1)) {
    const size_t paren = kernels.find('(', at);
    size_t begin = paren;
    while (begin > at && (std::isalnum(static_cast<unsigned char>(kernels[begin - 1])) ||
                          kernels[begin - 1] == '_'))
      --begin;
    declared.insert(kernels.substr(begin, paren - begin));
  }
  const std::vector<std::string> covered = covered_backend_methods();
  const std::set<std::string> registered(covered.begin(), covered.end());
  for (const auto& d : declared) EXPECT_TRUE(registered.count(d)) << d << " is not registered";
  for (const auto& r : registered) EXPECT_TRUE(declared.count(r)) << r << " is not in backend.h";
  EXPECT_GE(declared.size(), 26u);
  // Backend::kernel_names() (what supports() answers for) lists the same kernels.
  const std::vector<std::string>& names = Backend::kernel_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), declared);
}

// Every registered kernel has at least one planted control that must turn red, and every control
// names a registered kernel.
TEST(ContractRegistry, EveryKernelHasAPlantedControl) {
  const Registry r = cpu_registry();
  std::set<std::string> kernels, controlled;
  for (const KernelSpec& k : r.kernels) kernels.insert(k.name);
  int must_pass = 0;
  for (const Control& c : r.controls) {
    EXPECT_TRUE(kernels.count(c.kernel)) << c.name << " names no registered kernel " << c.kernel;
    if (c.expect_pass)
      ++must_pass;
    else
      controlled.insert(c.kernel);
  }
  for (const auto& k : kernels) EXPECT_TRUE(controlled.count(k)) << k << " has no planted control";
  EXPECT_EQ(must_pass, 1);  // the exact copy of the reference
}

Options quick(const std::string& only) {
  Options o;
  o.trials = 1;
  o.run_limits = false;
  o.only = only;
  return o;
}

TEST(ContractHarness, CleanKernelPasses) {
  std::ostringstream out;
  Report r = run_contract(quick("rms_norm"), out);
  EXPECT_TRUE(r.ok) << out.str();
  EXPECT_NE(r.summary.find("1 kernels: 1 pass gates 1-4, 0 fail"), std::string::npos) << r.summary;
}

// A runtime limit is taken again after a miss, each attempt against a fresh ceiling, and all of
// them are recorded; a kernel slower than its limit on every attempt stays a limit problem.
TEST(ContractHarness, ALimitMissedOnEveryAttemptStaysAProblemWithEachAttemptRecorded) {
  // Only the planted run is asserted: whether a clean kernel meets its limit is a timing (the
  // sanitizer build's add takes twice its limit), which no unit test asserts. So the filter (a
  // substring) must select the planted kernel alone: "sigmoid" does ("add" also selects
  // linear_add and expert_sum_add since 2026-12-07, whose sanitizer-build limits made it 3).
  Options o = quick("sigmoid");
  o.run_limits = true;
  o.plant_fault = "sigmoid:limit";
  std::ostringstream out;
  const Report r = run_contract(o, out);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.summary.find("1 kernels:"), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("1 limit problems"), std::string::npos) << r.summary;
  EXPECT_NE(out.str().find("limit sigmoid at"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("attempt 3 of 3"), std::string::npos) << out.str();
}

// A planted fault turns the contract red naming the kernel and the gate.
TEST(ContractHarness, PlantedFaultsAreNamed) {
  for (const char* gate : {"gate1", "gate2", "gate4"}) {
    Options o = quick("linear_bf16");
    o.plant_fault = std::string("linear_bf16:") + gate;
    std::ostringstream out;
    Report r = run_contract(o, out);
    EXPECT_FALSE(r.ok) << gate;
    const std::string want = std::string("kernel linear_bf16: FAIL gate ") + gate[4];
    EXPECT_NE(out.str().find(want), std::string::npos) << out.str();
    EXPECT_NE(r.summary.find("1 fail"), std::string::npos) << r.summary;
  }
}

// The same for the batched kernels of the frame step (sample_rows is exact: no gate 4 plant).
TEST(ContractHarness, PlantedFaultsAreNamedInBatchedKernels) {
  const std::pair<const char*, const char*> plants[] = {
      {"moe_experts", "gate1"}, {"moe_experts", "gate2"}, {"moe_experts", "gate4"},
      {"attention", "gate4"},   {"sample_rows", "gate1"}, {"sample_rows", "gate2"},
      {"copy_rows", "gate2"}};
  for (const auto& [kernel, gate] : plants) {
    Options o = quick(kernel);
    o.plant_fault = std::string(kernel) + ":" + gate;
    std::ostringstream out;
    Report r = run_contract(o, out);
    EXPECT_FALSE(r.ok) << kernel << " " << gate;
    const std::string want = std::string("kernel ") + kernel + ": FAIL gate " + gate[4];
    EXPECT_NE(out.str().find(want), std::string::npos) << out.str();
  }
}

TEST(ContractHarness, SummaryIsTheLastLine) {
  std::ostringstream out;
  Report r = run_contract(quick("add"), out);
  const std::string text = out.str();
  ASSERT_FALSE(text.empty());
  const size_t last = text.rfind('\n', text.size() - 2);
  EXPECT_EQ(text.substr(last + 1), r.summary + "\n");
  // The exact form of contract.md, every field a number.
  int a, b, c, d, e, f, g, h, consumed = 0;
  long gates_ms, limits_ms;
  const int fields = std::sscanf(
      r.summary.c_str(),
      "SUMMARY %d kernels: %d pass gates 1-4, %d fail, %d known findings; %d controls: %d red as "
      "planted, %d missed; %d limit problems; gates %ld ms, limits %ld ms%n",
      &a, &b, &c, &d, &e, &f, &g, &h, &gates_ms, &limits_ms, &consumed);
  EXPECT_EQ(fields, 10) << r.summary;
  EXPECT_EQ(static_cast<size_t>(consumed), r.summary.size()) << r.summary;
}

// Independent of the registry: with the gate input centred near 1, FP16 and BF16 intermediates
// land in clearly separate NMSE bands, both far above float32's limit; deep in the sigmoid's flat
// tail an FP16 overflow of exp(-g) hides (the failure the upstream suite once passed).
double silu_nmse(double mean, double sd, bool fp16, bool bf16) {
  std::mt19937_64 gen(5);
  std::normal_distribution<double> g(mean, sd), u(0.0, 1.0);
  double err = 0, ref = 0;
  auto low = [&](double v) {
    if (fp16) return double(f16_to_f32(f32_to_f16(float(v))));
    if (bf16) return double(bf16_to_f32(f32_to_bf16(float(v))));
    return v;
  };
  for (int i = 0; i < 20000; ++i) {
    const double gg = g(gen), uu = u(gen);
    const double exact = gg / (1 + std::exp(-gg)) * uu;
    const double e = low(std::exp(-low(gg)));  // overflows to inf in FP16 for gg < -11.1
    const double twin = low(low(low(gg) / low(1 + e)) * low(uu));
    err += (twin - exact) * (twin - exact);
    ref += exact * exact;
  }
  return err / ref;
}

TEST(ContractPower, CentredGateTellsFp16FromBf16) {
  const double fp16 = silu_nmse(1.0, 0.5, true, false), bf16 = silu_nmse(1.0, 0.5, false, true);
  std::printf("centred: fp16 NMSE %.3g, bf16 NMSE %.3g\n", fp16, bf16);
  EXPECT_GT(fp16, 1e-8);
  EXPECT_LT(fp16, 5e-7);  // a limit near 5e-7 separates the two
  EXPECT_GT(bf16, 5e-7);
  EXPECT_GT(fp16, 8 * 8 * 0x1.0p-48 * 16);  // far above the contract's float32 limit (8u)^2*16
}

TEST(ContractPower, SaturatedGateHidesFp16Overflow) {
  // Gate inputs around -20: exp(20) overflows FP16, the twin outputs exactly 0, and the exact
  // output is ~1e-8 of the input: the error energy is invisible next to a centred case's.
  const double hidden = silu_nmse(-20.0, 1.0, true, false);
  std::printf("saturated: fp16 NMSE %.3g (relative to a tiny reference)\n", hidden);
  // Relative to its own reference the twin is off by 100% (NMSE ~1): the overflow is only
  // visible because the contract compares against a float64 reference element by element; a
  // tolerance scaled to the output range (as the upstream gate was) would call it a pass.
  EXPECT_GT(hidden, 0.5);
}

}  // namespace
}  // namespace drama::contract

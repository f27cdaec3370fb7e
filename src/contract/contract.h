// The numerical contract (spec contract.md): every compute kernel of a backend checked against a
// float64 reference through four gates, planted faulty controls that must turn red, and runtime
// limits against ceilings measured in the same run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace drama::contract {

// One shape of one kernel with fresh random inputs. All outputs are compared as float32 values
// (integer outputs such as sampled ids are written as exact floats).
struct KernelCase {
  std::string label;      // "m=37 k=144 rows=5"
  int64_t rows = 1;       // batch rows (gate 4 checks each row alone against the batch)
  int64_t row_elems = 0;  // output floats per row; total output = rows * row_elems
  // Runs the kernel for rows [r0, r0 + n) into out (n * row_elems floats, pre-filled with NaN and
  // guarded by sentinels by the harness). Returns false when a buffer the case guards itself
  // (e.g. an integer output) had its sentinels touched.
  std::function<bool(Backend& backend, int64_t r0, int64_t n, float* out)> run;
  std::vector<double> reference;    // float64, rows * row_elems
  std::vector<double> degraded;     // the degraded twin (gate 3), same size
  std::vector<double> atol;         // per-element absolute bound (derived from the arithmetic)
  double rtol = 0;                  // per-element relative bound
  double nmse_limit = 0;            // error energy / reference energy
  bool exact = false;               // bitwise comparison (integer-valued or exactly rounded)
  std::vector<double> input_norms;  // every input's L2 norm (gate 1: none may be zero)
};

struct Limit {
  std::string size;    // the stated size, e.g. "m=4096 k=14336 rows=1"
  double bytes = 0;    // memory traffic of one call at that size
  double flops = 0;    // arithmetic of one call (0 = bandwidth-bound)
  double factor = 0;   // allowed multiple of the ceiling-derived floor
  double floor_s = 0;  // fixed allowance for call overhead
  // Times one call (seconds, median of repeats) on the backend under test.
  std::function<double(Backend& backend)> time_call;
};

struct KernelSpec {
  std::string name;
  std::string family;
  std::string tolerance_reason;  // the derivation, in one or two sentences
  // Fresh random inputs for trial `trial` (never zeros); one case per shape.
  std::function<std::vector<KernelCase>(uint64_t seed)> make_cases;
  Limit limit;
};

// A planted faulty variant of a kernel: run through the same gates, it must fail one.
struct Control {
  std::string name;          // "nvfp4 swapped nibbles"
  std::string kernel;        // the kernel family it imitates
  bool expect_pass = false;  // the exact copy of the reference must pass
  // The gate the fault is planted for (0: any). Red at another gate counts as missed: a control
  // of gate 4 (a row depending on its neighbours) must pass gates 1-3 to prove gate 4 works.
  int expect_gate = 0;
  std::function<std::vector<KernelCase>(uint64_t seed)> make_cases;
};

struct Registry {
  std::vector<KernelSpec> kernels;
  std::vector<Control> controls;
};

// Every kernel the model and codec call (backend.h), for any backend: each case copies its inputs
// into the backend's memory (DeviceCopies) before the call.
Registry kernel_registry();
// The registry the CPU backend runs (the same one; the name older tests use).
inline Registry cpu_registry() {
  return kernel_registry();
}

// The Backend method a registry entry checks ("linear_bf16" -> "linear").
std::string backend_method(const std::string& kernel);
// Names of the Backend kernels the registry covers; a test compares them with backend.h.
std::vector<std::string> covered_backend_methods();

struct Options {
  std::string backend = "cpu";
  int trials = 2;
  uint64_t seed = 20261129;
  bool run_limits = true;
  // Test only: "KERNEL:gate1|gate2|gate4" plants a fault in that kernel's cases, "KERNEL:limit"
  // adds a second to every timing of its runtime limit.
  std::string plant_fault;
  std::string only;  // run only kernels whose name contains this (controls skipped)
};

struct Report {
  nlohmann::json json;
  std::string summary;  // the SUMMARY line
  bool ok = false;
};

// Runs everything, printing one line per kernel and control and the SUMMARY line last.
Report run_contract(const Options& options, std::ostream& out);

}  // namespace drama::contract

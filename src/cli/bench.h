// `drama bench KIND`: one function per kind, each in its own bench_*.cpp. Each prints one JSON
// object on stdout (and writes it to --json FILE when given) with the ceiling measured in the
// same run.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/checkpoint.h"
#include "format/config.h"

#ifdef DRAMA_WITH_CUDA
#include <nlohmann/json.hpp>

#include "backend/cuda/grouped_experts.h"
#endif

namespace drama::cli {

void register_bench_gemv(CLI::App& bench, std::function<int()>& run);
void register_bench_decode(CLI::App& bench, std::function<int()>& run);
void register_bench_codec(CLI::App& bench, std::function<int()>& run);
void register_bench_verify(CLI::App& bench, std::function<int()>& run);

// `bench decode --synthetic CONFIG` (bench_synthetic.cpp): the backbone step on random weights of
// the config's geometry built in the backend's memory.
// `step_rows`: row counts timed beside batch 1 and paired batch 2 (graphs and, on CUDA, each
// kernel alone), each row its own cache slot.
int run_synthetic_decode(const std::string& config_path, const BackendOptions& backend,
                         int64_t steps, int repeats, const std::vector<int64_t>& step_rows,
                         const std::string& json_path);

#ifdef DRAMA_WITH_CUDA
// A step's kernels timed alone (cuda::time_each_kernel) as a receipt's table: launches, the sum of
// the kernels' times, late launches, the empty kernel's time (the floor of each figure), the
// time by kernel name in order of first launch (`by_kernel`: launches, us, share), and the first
// `sequence_kept` launches in order (`first_launches_us`: which product is which).
nlohmann::json kernel_table(const cuda::KernelTimes& times, size_t sequence_kept);
#endif

// A whole model but the codec (backbone and tower) of random weights of `config`'s geometry, in
// `backend`'s memory (bench_synthetic.cpp): what `bench decode --synthetic CONFIG --lanes N`
// serves its sessions from. The weights live as long as this object.
class SyntheticModel {
 public:
  SyntheticModel(Backend& backend, const Drama3Config& config);
  ~SyntheticModel();
  const ModelWeights& weights() const { return weights_; }
  double bytes() const;  // bytes of device memory the weights take
  double build_s() const { return build_s_; }

 private:
  struct Store;
  std::unique_ptr<Store> store_;
  ModelWeights weights_;
  double build_s_ = 0;
};

}  // namespace drama::cli

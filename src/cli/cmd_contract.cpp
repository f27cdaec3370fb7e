// `drama contract [--backend cpu|cuda] [--json FILE]`: the numerical contract (spec contract.md).
#include <iostream>

#include "cli/commands.h"
#include "contract/contract.h"
#include "util/fs.h"

namespace drama::cli {

void register_contract(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("contract", "Run the numerical contract on a backend's kernels");
  auto opts = std::make_shared<contract::Options>();
  auto json_path = std::make_shared<std::string>();
  sub->add_option("--backend", opts->backend, "Backend to check")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--json", *json_path, "Write the receipt (per kernel, gate and control) here");
  sub->add_option("--trials", opts->trials, "Fresh random inputs per shape")
      ->check(CLI::Range(1, 100));
  sub->add_option("--seed", opts->seed, "Seed of the random inputs");
  sub->add_option("--only", opts->only, "Run only kernels whose name contains this (no controls)");
  sub->add_flag(
      "--no-limits", [opts](int64_t) { opts->run_limits = false; }, "Skip the runtime limits");
  sub->add_option("--plant-fault", opts->plant_fault,
                  "Test only: KERNEL:gate1|gate2|gate4 plants a fault in that kernel")
      ->group("");
  sub->callback([&run, opts, json_path] {
    run = [opts, json_path] {
      std::cout << "drama contract: backend " << opts->backend << ", seed " << opts->seed
                << ", trials " << opts->trials << "\n";
      contract::Report report = contract::run_contract(*opts, std::cout);
      if (!json_path->empty()) write_text_file_atomic(*json_path, report.json.dump(2) + "\n");
      return report.ok ? 0 : 1;
    };
  });
}

}  // namespace drama::cli

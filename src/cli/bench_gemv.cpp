#include "cli/bench.h"
#include "cli/commands.h"

namespace drama::cli {

void register_bench_gemv(CLI::App& bench, std::function<int()>& run) {
  register_unbuilt(bench, run, "gemv", "not built yet");
}

}  // namespace drama::cli

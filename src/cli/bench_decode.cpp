#include "cli/bench.h"
#include "cli/commands.h"

namespace drama::cli {

void register_bench_decode(CLI::App& bench, std::function<int()>& run) {
  register_unbuilt(bench, run, "decode", "not built yet");
}

}  // namespace drama::cli

#include "cli/commands.h"

namespace drama::cli {

void register_bench(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "bench", "Performance figures as JSON");
}

}  // namespace drama::cli

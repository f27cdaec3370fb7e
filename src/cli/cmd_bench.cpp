#include "cli/bench.h"
#include "cli/commands.h"

namespace drama::cli {

void register_bench(CLI::App& app, Runner& run) {
  auto* bench = app.add_subcommand("bench", "Performance figures as one JSON object on stdout");
  bench->require_subcommand(1);
  register_bench_gemv(*bench, run);
  register_bench_decode(*bench, run);
  register_bench_codec(*bench, run);
  register_bench_verify(*bench, run);
}

}  // namespace drama::cli

// `drama make-checkpoint`: a random-weight checkpoint for tests and benchmarks (interfaces.md).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "format/random_checkpoint.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama::cli {

namespace {
struct MakeCheckpointArgs {
  std::string config;
  uint64_t seed = 1;
  std::string out;
  bool nvfp4 = false;
  int64_t prune_to = 0;
  std::string router_layout = "full";
  std::string name;
};
}  // namespace

void register_make_checkpoint(CLI::App& app, Runner& run) {
  auto args = std::make_shared<MakeCheckpointArgs>();
  auto* sub = app.add_subcommand("make-checkpoint", "Write a random-weight checkpoint");
  sub->add_option("--config", args->config, "drama3 config.json (e.g. configs/tiny.json)")
      ->required();
  sub->add_option("--seed", args->seed, "seed; the same config and seed give the same bytes")
      ->required();
  sub->add_option("-o,--output", args->out, "output directory (must not exist)")->required();
  sub->add_flag("--nvfp4", args->nvfp4, "store experts as NVFP4 (writes hf_quant_config.json)");
  sub->add_option("--prune-to", args->prune_to, "keep N experts per MoE layer")
      ->check(CLI::PositiveNumber);
  sub->add_option("--router-layout", args->router_layout,
                  "pruned router rows: full (all experts) or sliced (kept order)")
      ->check(CLI::IsMember({"full", "sliced"}));
  sub->add_option("--name", args->name, "manifest name (default derived from the options)");
  sub->callback([&run, args] {
    run = [args] {
      nlohmann::json config;
      try {
        config = nlohmann::json::parse(read_text_file(args->config));
      } catch (const nlohmann::json::exception& e) {
        throw UsageError("--config " + args->config + ": invalid JSON (" + e.what() + ")");
      }
      RandomCheckpointOptions o;
      o.config = std::move(config);
      o.seed = args->seed;
      o.nvfp4 = args->nvfp4;
      if (args->prune_to > 0) o.prune_to = args->prune_to;
      o.router_layout = args->router_layout;
      o.name = args->name;
      write_random_checkpoint(o, args->out);
      std::fprintf(stderr, "make-checkpoint: wrote %s\n", args->out.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli

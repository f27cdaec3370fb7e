// `drama quantize IN_DIR OUT_DIR [--keep-experts FILE]` (interfaces.md): BF16 -> NVFP4 and pruning.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "format/config.h"
#include "format/quantize_checkpoint.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama::cli {

namespace {
struct QuantizeArgs {
  std::string in, out, keep_experts, router_layout, name;
};
}  // namespace

void register_quantize(CLI::App& app, Runner& run) {
  auto args = std::make_shared<QuantizeArgs>();
  auto* sub = app.add_subcommand("quantize", "Quantize a BF16 checkpoint to NVFP4 (and prune)");
  sub->add_option("IN_DIR", args->in, "BF16 checkpoint directory")->required();
  sub->add_option("OUT_DIR", args->out, "output directory (must not exist)")->required();
  sub->add_option("--keep-experts", args->keep_experts,
                  "JSON list per backbone layer of the original expert ids to keep (null for "
                  "dense layers)");
  sub->add_option("--router-layout", args->router_layout,
                  "pruned router rows: full (all experts) or sliced (kept order); default: as "
                  "the input")
      ->check(CLI::IsMember({"full", "sliced"}));
  sub->add_option("--name", args->name, "manifest name (default: the input's name + -nvfp4)");
  sub->callback([&run, args] {
    run = [args] {
      QuantizeOptions o;
      o.router_layout = args->router_layout;
      o.name = args->name;
      if (!args->keep_experts.empty()) {
        const Drama3Config input = load_drama3_config(args->in + "/config.json");
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(read_text_file(args->keep_experts));
        } catch (const nlohmann::json::exception& e) {
          throw UsageError("--keep-experts " + args->keep_experts + ": invalid JSON (" + e.what() +
                           ")");
        } catch (const Error& e) {
          throw UsageError("--keep-experts " + args->keep_experts + ": " + e.what());
        }
        o.keep_experts = parse_keep_experts(j, input, "--keep-experts " + args->keep_experts);
      }
      quantize_checkpoint(args->in, args->out, o);
      std::fprintf(stderr, "quantize: wrote %s\n", args->out.c_str());
      return 0;
    };
  });
}

}  // namespace drama::cli

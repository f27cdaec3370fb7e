#include "cli/commands.h"

namespace drama::cli {

void register_quantize(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "quantize", "Quantize a BF16 checkpoint to NVFP4 (and prune)");
}

}  // namespace drama::cli

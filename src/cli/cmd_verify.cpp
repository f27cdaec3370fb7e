#include "cli/commands.h"

namespace drama::cli {

void register_verify(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "verify", "Verify a checkpoint directory against a manifest");
}

}  // namespace drama::cli

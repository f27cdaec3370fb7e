#include "cli/commands.h"

namespace drama::cli {

void register_fetch(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "fetch", "Download and verify a pinned checkpoint");
}

}  // namespace drama::cli

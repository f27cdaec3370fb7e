#include "cli/commands.h"

namespace drama::cli {

void register_make_checkpoint(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "make-checkpoint", "Write a random-weight checkpoint");
}

}  // namespace drama::cli

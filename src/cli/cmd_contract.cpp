#include "cli/commands.h"

namespace drama::cli {

void register_contract(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "contract", "Run the numerical contract");
}

}  // namespace drama::cli

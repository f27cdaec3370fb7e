#include "cli/commands.h"

namespace drama::cli {

void register_serve(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "serve", "Serve the OpenAI-compatible speech API");
}

}  // namespace drama::cli

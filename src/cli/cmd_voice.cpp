#include "cli/commands.h"

namespace drama::cli {

void register_voice(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "voice", "Write a voice file from reference audio");
}

}  // namespace drama::cli

#include "cli/commands.h"

namespace drama::cli {

void register_say(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "say", "Speak one utterance into an audio file");
}

}  // namespace drama::cli

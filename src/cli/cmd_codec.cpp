#include "cli/commands.h"

namespace drama::cli {

void register_codec(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "codec", "Encode audio to codes or decode codes to audio");
}

}  // namespace drama::cli

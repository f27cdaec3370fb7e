#include "cli/commands.h"

namespace drama::cli {

void register_logits(CLI::App& app, Runner& run) {
  register_unbuilt(app, run, "logits", "Teacher-forced logits for parity tools");
}

}  // namespace drama::cli

#include <cstdio>

#include "cli/commands.h"

namespace drama::cli {

void register_unbuilt(CLI::App& app, Runner& run, const char* name, const char* description) {
  auto* sub = app.add_subcommand(name, description);
  sub->allow_extras();
  sub->callback([&run, name] {
    run = [name] {
      std::fprintf(stderr, "drama %s: not built yet\n", name);
      return 2;
    };
  });
}

}  // namespace drama::cli

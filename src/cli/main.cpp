// drama: one executable, subcommands as in interfaces.md. Errors are caught here: one line on
// stderr, exit 1 (runtime) or 2 (arguments).
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"drama: inference engine and server for Drama-3 speech models"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  app.set_version_flag("--version", std::string("drama ") + DRAMA_VERSION);
  // Every option's --help line shows its default (inherited by the subcommands added below).
  app.option_defaults()->always_capture_default();
  drama::cli::Runner run;
  drama::cli::register_serve(app, run);
  drama::cli::register_say(app, run);
  drama::cli::register_voice(app, run);
  drama::cli::register_codec(app, run);
  drama::cli::register_fetch(app, run);
  drama::cli::register_verify(app, run);
  drama::cli::register_quantize(app, run);
  drama::cli::register_make_checkpoint(app, run);
  drama::cli::register_contract(app, run);
  drama::cli::register_logits(app, run);
  drama::cli::register_bench(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "drama: %s\n", e.what());
    return 2;
  }
  try {
    return run ? run() : 2;
  } catch (const drama::UsageError& e) {
    std::fprintf(stderr, "drama: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drama: %s\n", e.what());
    return 1;
  }
}

// One registration function per subcommand (interfaces.md); each lives in its own cmd_*.cpp.
// A registered command sets `run` to the function main() calls after parsing; it returns the
// process exit code (0 ok, 1 runtime failure; argument errors exit 2 through CLI11).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace drama::cli {

using Runner = std::function<int()>;

void register_serve(CLI::App& app, Runner& run);
void register_say(CLI::App& app, Runner& run);
void register_voice(CLI::App& app, Runner& run);
void register_codec(CLI::App& app, Runner& run);
void register_fetch(CLI::App& app, Runner& run);
void register_verify(CLI::App& app, Runner& run);
void register_quantize(CLI::App& app, Runner& run);
void register_make_checkpoint(CLI::App& app, Runner& run);
void register_contract(CLI::App& app, Runner& run);
void register_logits(CLI::App& app, Runner& run);
void register_bench(CLI::App& app, Runner& run);

// For commands not built yet: prints "drama NAME: not built yet" and exits 2.
void register_unbuilt(CLI::App& app, Runner& run, const char* name, const char* description);

}  // namespace drama::cli

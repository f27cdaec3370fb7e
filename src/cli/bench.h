// `drama bench KIND`: one function per kind, each in its own bench_*.cpp. Each prints one JSON
// object on stdout (and writes it to --json FILE when given) with the ceiling measured in the
// same run.
#pragma once

#include <CLI/CLI.hpp>

namespace drama::cli {

void register_bench_gemv(CLI::App& bench, std::function<int()>& run);
void register_bench_decode(CLI::App& bench, std::function<int()>& run);
void register_bench_codec(CLI::App& bench, std::function<int()>& run);
void register_bench_verify(CLI::App& bench, std::function<int()>& run);

}  // namespace drama::cli

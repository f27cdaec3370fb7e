// `drama bench KIND`: one function per kind, each in its own bench_*.cpp. Each prints one JSON
// object on stdout (and writes it to --json FILE when given) with the ceiling measured in the
// same run.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "backend/backend.h"

namespace drama::cli {

void register_bench_gemv(CLI::App& bench, std::function<int()>& run);
void register_bench_decode(CLI::App& bench, std::function<int()>& run);
void register_bench_codec(CLI::App& bench, std::function<int()>& run);
void register_bench_verify(CLI::App& bench, std::function<int()>& run);

// `bench decode --synthetic CONFIG` (bench_synthetic.cpp): the backbone step on random weights of
// the config's geometry built in the backend's memory.
int run_synthetic_decode(const std::string& config_path, const BackendOptions& backend,
                         int64_t steps, int repeats, const std::string& json_path);

}  // namespace drama::cli

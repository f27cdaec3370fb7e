// Helpers for the model tests: temporary directories under DRAMA_TEST_TMP, running `drama` and the
// PyTorch reference (tools/reference/cli.py), and tiny random checkpoints made at test time.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "format/config.h"
#include "format/safetensors.h"
#include "format/voice.h"
#include "support/drama_cli.h"
#include "util/sampling.h"

namespace drama::testing {

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
inline std::string drama_bin() {
  return env_or("DRAMA_BIN", "drama");
}
inline std::string source_dir() {
  return env_or("DRAMA_SOURCE_DIR", ".");
}
inline std::string python() {
  return env_or("DRAMA_PYTHON", "/usr/bin/python3");
}

// A fresh directory for one test binary, removed at exit unless DRAMA_KEEP_TMP is set.
inline const std::filesystem::path& test_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = env_or("DRAMA_TEST_TMP", std::filesystem::temp_directory_path());
    std::filesystem::create_directories(base);
    std::string tmpl = (base / "model-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    return std::filesystem::path(tmpl);
  }();
  static const struct Cleanup {
    ~Cleanup() {
      if (!std::getenv("DRAMA_KEEP_TMP")) std::filesystem::remove_all(test_dir());
    }
  } cleanup;
  return dir;
}

struct CommandResult {
  int status = -1;
  std::string output;  // stdout + stderr
};

inline CommandResult run_command(const std::string& cmd) {
  static int counter = 0;
  const auto log = test_dir() / ("cmd-" + std::to_string(++counter) + ".log");
  const int rc = std::system((cmd + " > " + quote(log.string()) + " 2>&1").c_str());
  CommandResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  r.output = ss.str();
  return r;
}

// Runs a command that must succeed; fails the test (fatally) with its output otherwise.
inline void must_run(const std::string& cmd) {
  const CommandResult r = run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

// `drama make-checkpoint --config configs/<config> --seed <seed> <extra>` into test_dir()/name,
// made once per test binary.
inline std::filesystem::path make_checkpoint(const std::string& name, const std::string& extra,
                                             const std::string& config = "configs/tiny.json",
                                             int seed = 1) {
  const auto dir = test_dir() / name;
  if (!std::filesystem::exists(dir)) {
    const std::string cmd = quote(drama_bin()) + " make-checkpoint --config " +
                            quote(source_dir() + "/" + config) + " --seed " + std::to_string(seed) +
                            " " + extra + " -o " + quote(dir.string());
    const CommandResult r = run_command(cmd);
    if (r.status != 0) throw std::runtime_error(cmd + "\n" + r.output);
  }
  return dir;
}

inline std::string reference_cli() {
  return quote(python()) + " " + quote(source_dir() + "/tools/reference/cli.py");
}

// Float32 tensors of a safetensors file, by name.
inline std::map<std::string, std::vector<float>> read_f32_tensors(const std::filesystem::path& p) {
  SafetensorsFile f(p);
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : f.tensors()) {
    auto v = f.view(t.name).as<float>();
    out[t.name].assign(v.begin(), v.end());
  }
  return out;
}

// ||a - b|| / ||b||, in double.
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// A voice of `frames` deterministic codes in [0, codebook_size) for the config.
inline Voice random_voice(const Drama3Config& c, int64_t frames, uint64_t seed,
                          const std::string& transcript) {
  Voice v;
  v.frames = frames;
  v.num_codebooks = c.audio.num_codebooks;
  v.transcript = transcript;
  for (int64_t i = 0; i < frames * v.num_codebooks; ++i)
    v.codes.push_back(static_cast<int32_t>(mix64(seed * 1000003 + i) % c.audio.codebook_size));
  return v;
}

// The tiny checkpoints the parity suites run on: (name, make-checkpoint options), and the test
// name gtest gets for each ('-' is not allowed there).
using CheckpointCase = std::pair<const char*, const char*>;
inline const std::vector<CheckpointCase> kParityCheckpoints = {
    {"tiny-bf16", ""},
    {"tiny-bf16-pruned-sliced", "--prune-to 5 --router-layout sliced"},
    {"tiny-nvfp4", "--nvfp4"},
    {"tiny-nvfp4-pruned-full", "--nvfp4 --prune-to 5 --router-layout full"},
    {"tiny-nvfp4-pruned-sliced", "--nvfp4 --prune-to 5 --router-layout sliced"}};
inline std::string checkpoint_case_name(const ::testing::TestParamInfo<CheckpointCase>& info) {
  std::string s = info.param.first;
  for (char& ch : s) ch = ch == '-' ? '_' : ch;
  return s;
}

}  // namespace drama::testing

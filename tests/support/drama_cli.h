// Running the drama binary from a test as a user would: one shell command, its exit status and
// what it wrote to stderr and stdout.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "util/fs.h"

namespace drama::testing {

// One shell word: s in single quotes, its own single quotes escaped.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliResult {
  int status = -1;  // the exit status; -1 when killed by a signal
  std::string err, out;
};

// $DRAMA_BIN (or `drama` on the path) with `args` (already quoted where needed), run in `dir`
// (relative paths in args resolve there), stderr and stdout kept in dir/stderr.txt and
// dir/stdout.txt; `env` is prefixed to the command, e.g. "DRAMA_MODELS_DIR='/x' ".
inline CliResult run_drama(const std::string& args, const std::filesystem::path& dir,
                           const std::string& env = "") {
  const char* bin = std::getenv("DRAMA_BIN");
  const std::filesystem::path err = dir / "stderr.txt", out = dir / "stdout.txt";
  const std::string cmd = "cd " + quote(dir.string()) + " && " + env +
                          quote(bin && *bin ? bin : "drama") + " " + args + " 2>" +
                          quote(err.string()) + " >" + quote(out.string());
  const int raw = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = read_text_file(err);
  r.out = read_text_file(out);
  return r;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace drama::testing

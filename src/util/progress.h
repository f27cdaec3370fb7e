// Progress of long work (downloads, verification, benchmarks) on stderr, as interfaces.md asks:
// a bar with percent on a terminal, nothing at all when stderr is not a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace drama {

class Progress {
 public:
  // `total` bytes of work. Silent unless stderr is a terminal and `enabled` is true.
  Progress(std::string label, uint64_t total, bool enabled = true);
  ~Progress();  // finishes the line if one was drawn
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t done);
  void set_label(std::string label);
  void finish();
  bool active() const { return active_; }

 private:
  void draw(bool force);

  std::string label_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  bool active_ = false;
  bool drawn_ = false;
  int last_permille_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// True when stderr is a terminal (progress is drawn only then).
bool stderr_is_terminal();

}  // namespace drama

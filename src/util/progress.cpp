#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace drama {

bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      active_(enabled && stderr_is_terminal()),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  finish();
}

void Progress::set_label(std::string label) {
  label_ = std::move(label);
  draw(true);
}

void Progress::add(uint64_t done) {
  done_ += done;
  draw(false);
}

void Progress::draw(bool force) {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  const int permille = total_ ? static_cast<int>(done_ * 1000 / total_) : 0;
  // Redraw at most ten times a second, or when the shown figure changes at a forced point.
  if (!force && (permille == last_permille_ || now - last_draw_ < std::chrono::milliseconds(100)))
    return;
  last_permille_ = permille;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double mib_s = seconds > 0 ? done_ / seconds / (1 << 20) : 0;
  constexpr int kWidth = 30;
  const int filled =
      total_ ? static_cast<int>(std::min<uint64_t>(done_, total_) * kWidth / total_) : 0;
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %8.1f MiB/s\x1b[K", label_.c_str(), bar.c_str(),
               permille / 10.0, mib_s);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (!active_) return;
  if (drawn_) {
    draw(true);
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
  active_ = false;
}

}  // namespace drama

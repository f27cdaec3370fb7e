// `speed` (interfaces.md): tempo change with pitch kept, through Rubber Band (Debian's
// librubberband, R2 "faster" engine, real-time mode, one thread). Deterministic: the same
// samples pushed in the same pieces give the same output. Output length is
// round(input length / speed).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace RubberBand {
class RubberBandStretcher;
}

namespace drama {

class TimeStretcher {
 public:
  // speed in [0.25, 4] (rules::check_speed); 2 = twice as fast, half as long.
  TimeStretcher(int64_t sample_rate, double speed);
  ~TimeStretcher();
  TimeStretcher(const TimeStretcher&) = delete;
  TimeStretcher& operator=(const TimeStretcher&) = delete;

  // Appends the stretched samples that are ready (the stretcher holds back its latency).
  void push(std::span<const float> in, std::vector<float>& out);
  // Appends the rest, so that everything emitted totals round(input / speed) samples.
  void finish(std::vector<float>& out);

 private:
  void retrieve(std::vector<float>& out);

  std::unique_ptr<RubberBand::RubberBandStretcher> rb_;
  double speed_;
  int64_t pushed_ = 0;      // input samples
  int64_t emitted_ = 0;     // output samples handed out
  int64_t to_discard_ = 0;  // the stretcher's start delay, not yet dropped
  std::vector<float> buf_;
};

// The whole signal at once (the same as one push then finish).
std::vector<float> time_stretch(std::span<const float> pcm, int64_t sample_rate, double speed);

}  // namespace drama

#include "audio/time_stretch.h"

#include <rubberband/RubberBandStretcher.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace drama {

namespace {

constexpr size_t kBlock = 1024;  // samples handed to process() at a time

}  // namespace

TimeStretcher::TimeStretcher(int64_t sample_rate, double speed) : speed_(speed) {
  if (!(speed > 0) || !std::isfinite(speed)) throw UsageError("speed must be a positive number");
  using RB = RubberBand::RubberBandStretcher;
  const RB::Options options = RB::OptionProcessRealTime | RB::OptionThreadingNever |
                              RB::OptionEngineFaster | RB::OptionPitchHighConsistency;
  rb_ = std::make_unique<RB>(static_cast<size_t>(sample_rate), 1, options, 1.0 / speed, 1.0);
  rb_->setMaxProcessSize(kBlock);
  // Real-time mode: feed the preferred padding first, then drop the start delay from the output,
  // so output sample 0 lines up with input sample 0.
  std::vector<float> pad(rb_->getPreferredStartPad(), 0.0f);
  for (size_t at = 0; at < pad.size(); at += kBlock) {
    const float* p = pad.data() + at;
    rb_->process(&p, std::min(kBlock, pad.size() - at), false);
  }
  to_discard_ = static_cast<int64_t>(rb_->getStartDelay());
}

TimeStretcher::~TimeStretcher() = default;

void TimeStretcher::retrieve(std::vector<float>& out) {
  for (;;) {
    const int n = rb_->available();
    if (n <= 0) return;
    buf_.resize(static_cast<size_t>(n));
    float* p = buf_.data();
    const size_t got = rb_->retrieve(&p, static_cast<size_t>(n));
    size_t from = 0;
    if (to_discard_ > 0) {
      from = std::min(got, static_cast<size_t>(to_discard_));
      to_discard_ -= static_cast<int64_t>(from);
    }
    out.insert(out.end(), buf_.begin() + static_cast<std::ptrdiff_t>(from),
               buf_.begin() + static_cast<std::ptrdiff_t>(got));
    emitted_ += static_cast<int64_t>(got - from);
  }
}

void TimeStretcher::push(std::span<const float> in, std::vector<float>& out) {
  for (size_t at = 0; at < in.size(); at += kBlock) {
    const float* p = in.data() + at;
    rb_->process(&p, std::min(kBlock, in.size() - at), false);
    retrieve(out);
  }
  pushed_ += static_cast<int64_t>(in.size());
}

void TimeStretcher::finish(std::vector<float>& out) {
  const size_t base = out.size();
  const int64_t before = emitted_;
  const float* p = nullptr;
  float zero = 0.0f;
  p = &zero;
  rb_->process(&p, 0, true);
  retrieve(out);
  // Exactly round(input / speed) samples in all: trim what the stretcher's tail adds, or pad.
  const int64_t target = static_cast<int64_t>(std::llround(static_cast<double>(pushed_) / speed_));
  const int64_t tail = std::max<int64_t>(0, target - before);
  out.resize(base + static_cast<size_t>(tail), 0.0f);
  emitted_ = before + tail;
}

std::vector<float> time_stretch(std::span<const float> pcm, int64_t sample_rate, double speed) {
  TimeStretcher s(sample_rate, speed);
  std::vector<float> out;
  s.push(pcm, out);
  s.finish(out);
  return out;
}

}  // namespace drama
